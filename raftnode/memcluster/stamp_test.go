package memcluster

import (
	"bytes"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
)

// A leader stamps the offsets and leader epoch of what it proposes once it
// knows where its term starts (its first entry applied), so every replica
// stores a large entry as raft's own bytes, uncopied; the offsets the
// proposals are acknowledged with are those stored. Proposals stepped
// before it knows are stamped by each replica's storage in a copy.
func TestLeadersStampWhatTheyPropose(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1) // raft draws its election timeouts from crypto/rand
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{1}, nil)
	l := waitLeader(t, c, 1)
	first := c.Propose(l, 1, raftnode.UserData(batch(1, []byte("first"))))
	waitResults(t, c, []raftnode.ProposalID{first})
	require.NoError(t, c.Results[first].Err)

	var ids []raftnode.ProposalID
	var borrowed int64
	for i := range 6 { // each over mergeLimit: an entry of its own
		data := raftnode.UserData(batch(1+i%3, bytes.Repeat([]byte{byte('a' + i)}, 70<<10)))
		borrowed += int64(len(data) - 1)
		ids = append(ids, c.Propose(l, 1, data))
	}
	waitResults(t, c, ids)
	ok, err := c.RunUntil(20000, func() bool {
		for _, n := range c.Nodes() {
			if n.HighWatermark(1) < c.Results[ids[len(ids)-1]].NextOffset {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "every replica has every entry")

	next := c.Results[first].NextOffset
	for _, id := range ids {
		r := c.Results[id]
		require.NoError(t, r.Err)
		require.Equal(t, next, r.BaseOffset, "proposal %d", id)
		next = r.NextOffset
	}
	for _, n := range c.Nodes() {
		require.Equal(t, borrowed, n.Logs[1].Stats().BytesBorrowed, "node %d stored the entries uncopied", n.ID)
		for _, id := range ids {
			r := c.Results[id]
			bs, err := n.Logs[1].Read(r.BaseOffset, r.NextOffset, 1<<30)
			require.NoError(t, err)
			require.Len(t, bs, 1)
			require.Equal(t, [2]int64{r.BaseOffset, r.NextOffset}, [2]int64{bs[0].BaseOffset, bs[0].NextOffset})
		}
	}
}
