package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The ring keeps the newest entries within its byte limit across
// wrap-arounds, growth, truncation and retention.
func TestTailCacheRing(t *testing.T) {
	data := make([]byte, 100-cacheEntOverhead) // each entry charges 100 bytes
	ent := func(i uint64) cacheEnt {
		return cacheEnt{data: data, base: int64(10 * i), next: int64(10*i + 10)}
	}
	c := tailCache{limit: 50 * 100}
	for i := uint64(1); i <= 1000; i++ {
		c.add(i, ent(i))
		require.Equal(t, min(int(i), 50), c.len())
		require.Equal(t, i-uint64(c.len())+1, c.first)
		require.LessOrEqual(t, c.bytes, c.limit)
	}
	for i := uint64(951); i <= 1000; i++ {
		e, ok := c.get(i)
		require.True(t, ok)
		require.Equal(t, int64(10*i), e.base)
	}
	_, ok := c.get(950)
	require.False(t, ok, "evicted")
	require.True(t, c.covers(9510))
	require.False(t, c.covers(9509))
	require.Equal(t, 0, c.find(9515))
	require.Equal(t, 10, c.find(9615))
	require.Equal(t, c.len(), c.find(10010))

	c.truncate(991) // a Raft conflict from 991 on
	require.Equal(t, 40, c.len())
	require.Equal(t, int64(40*100), c.bytes)
	c.add(991, ent(991)) // continues the run
	require.Equal(t, 41, c.len())
	c.dropBefore(981) // retention
	require.Equal(t, uint64(981), c.first)
	require.Equal(t, 11, c.len())
	c.add(5000, ent(5000)) // not the next index: starts over
	require.Equal(t, 1, c.len())
	require.Equal(t, uint64(5000), c.first)
	c.truncate(5000)
	require.Zero(t, c.len())
	require.Zero(t, c.bytes)
}

// TestTailCacheGivesBackItsRing: the ring shrinks with the entries the
// cache holds (at most four slots per entry above ringRoomMin) and goes
// when they all leave: a stream that cached many small entries does not
// keep their slots once the budget takes them for other streams. Entries
// survive every resize, in order.
func TestTailCacheGivesBackItsRing(t *testing.T) {
	data := make([]byte, 100-cacheEntOverhead)
	c := tailCache{limit: 1 << 30}
	const many = 100_000
	for i := uint64(1); i <= many; i++ {
		c.add(i, cacheEnt{data: data, base: int64(i)})
	}
	require.GreaterOrEqual(t, len(c.ring), many)
	for c.len() > 10 {
		c.popOldest() // as the budget evicts
		require.LessOrEqual(t, len(c.ring), max(ringRoomMin, 4*c.len()))
	}
	require.Equal(t, uint64(many-9), c.first)
	for k := range c.len() {
		e, ok := c.get(c.first + uint64(k))
		require.True(t, ok)
		require.Equal(t, int64(c.first)+int64(k), e.base)
	}
	c.truncate(many - 4)
	require.Equal(t, 5, c.len())
	c.dropBefore(many + 1)
	require.Zero(t, c.len())
	require.Nil(t, c.ring, "an empty cache holds no ring")
	c.add(many+1, cacheEnt{data: data, base: many + 1})
	require.Equal(t, 1, c.len())
}
