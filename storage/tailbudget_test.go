package storage

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/vfs"
)

func budgetLog(t *testing.T, fs vfs.FS, stream uint64, b *TailBudget) *Log {
	l, err := Open(Options{FS: fs, Dir: fmt.Sprintf("/s%d", stream), Stream: stream, SegmentSize: 4 * mib, TailBudget: b})
	require.NoError(t, err)
	return l
}

// TestTailBudgetSharedByRecency: one hot stream keeps far more than the old
// 8 MiB per stream; when another is written, memory moves to it from the
// stream written least recently; the budget holds throughout, and closing
// a log gives its share back.
func TestTailBudgetSharedByRecency(t *testing.T) {
	fs := vfs.NewMem()
	b := NewTailBudget(24 * mib)
	hot, other := budgetLog(t, fs, 1, b), budgetLog(t, fs, 2, b)
	fillLog(&testing.B{}, hot, 16<<10, 20*mib)
	require.True(t, hot.cache.covers(0), "20 MiB of one stream all in memory")
	require.LessOrEqual(t, b.Used(), b.Limit())

	fillLog(&testing.B{}, other, 16<<10, 12*mib)
	require.LessOrEqual(t, b.Used(), b.Limit())
	require.True(t, other.cache.covers(0), "the stream written last keeps all of it")
	require.False(t, hot.cache.covers(0), "the other gave up its oldest records")
	require.Positive(t, hot.cache.bytes, "but keeps its newest")
	// Reads of what left the cache come from the disk, the same bytes.
	end := hot.EndOffset()
	bs, err := hot.Read(0, end, mib)
	require.NoError(t, err)
	require.Equal(t, int64(0), bs[0].BaseOffset)

	require.NoError(t, other.Close())
	require.Equal(t, hot.cache.bytes, b.Used(), "a closed log's share is given back")
	require.NoError(t, hot.Close())
	require.Zero(t, b.Used())
}

// TestTailBudgetPerLogCap: TailCacheBytes still caps one log under a
// budget.
func TestTailBudgetPerLogCap(t *testing.T) {
	b := NewTailBudget(64 * mib)
	l, err := Open(Options{FS: vfs.NewMem(), Dir: "/s", Stream: 1, TailBudget: b, TailCacheBytes: 2 * mib})
	require.NoError(t, err)
	defer l.Close()
	fillLog(&testing.B{}, l, 16<<10, 8*mib)
	require.LessOrEqual(t, l.cache.bytes, int64(2*mib))
	require.Equal(t, l.cache.bytes, b.Used())
}
