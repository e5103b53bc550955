package storage

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

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

// TestTailBudgetLooksOnlyAtLogsHoldingBytes: eviction considers only the
// logs whose caches hold bytes. Idle logs' few entries are the oldest and
// go first; the logs then leave the budget's list, so a hot log's
// evictions no longer visit every idle log of the server.
func TestTailBudgetLooksOnlyAtLogsHoldingBytes(t *testing.T) {
	fs := vfs.NewMem()
	b := NewTailBudget(8 * mib)
	var idle []*Log
	for i := range 100 {
		l := budgetLog(t, fs, uint64(10+i), b)
		fillLog(&testing.B{}, l, 1<<10, 1<<10) // one entry, as an idle stream's first
		idle = append(idle, l)
	}
	require.Equal(t, 100, b.holdingLogs())
	empty := budgetLog(t, fs, 1, b)
	require.Equal(t, 100, b.holdingLogs(), "a log with nothing cached is not looked at")

	hot := budgetLog(t, fs, 2, b)
	fillLog(&testing.B{}, hot, 16<<10, 12*mib)
	require.Equal(t, 1, b.holdingLogs(), "the idle logs' entries went first, and the logs with them")
	for _, l := range idle {
		require.Zero(t, l.cache.bytes)
	}
	require.LessOrEqual(t, b.Used(), b.Limit())

	fillLog(&testing.B{}, idle[0], 1<<10, 1<<10)
	require.Equal(t, 2, b.holdingLogs(), "written again, a log is looked at again")
	require.NoError(t, hot.Close())
	require.Equal(t, 1, b.holdingLogs(), "a closed log is off the list")
	require.Equal(t, idle[0].cache.bytes, b.Used())
	for _, l := range append(idle, empty) {
		require.NoError(t, l.Close())
	}
	require.Zero(t, b.holdingLogs())
	require.Zero(t, b.Used())
}

// BenchmarkTailBudgetBesideIdleLogs: a hot log's writes under a full
// budget beside idle logs. Each eviction visited every log before it
// looked only at those holding bytes.
func BenchmarkTailBudgetBesideIdleLogs(b *testing.B) {
	fs := vfs.NewMem()
	budget := NewTailBudget(4 * mib)
	for i := range 10000 { // a server's idle streams
		l, err := Open(Options{FS: fs, Dir: fmt.Sprintf("/idle%d", i), Stream: uint64(10 + i), SegmentSize: mib, TailBudget: budget})
		require.NoError(b, err)
		fillLog(b, l, 512, 512)
		defer l.Close()
	}
	hot, err := Open(Options{FS: fs, Dir: "/hot", Stream: 1, SegmentSize: 64 * mib, TailBudget: budget})
	require.NoError(b, err)
	defer hot.Close()
	data := userPayload(16 << 10)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%4096 == 0 { // keep the segment files of the memory FS bounded
			_, err := hot.DeleteBefore(hot.EndOffset())
			require.NoError(b, err)
		}
		e := &pb.Entry{Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: data}
		require.NoError(b, hot.Write([]*pb.Entry{e}, nil))
	}
}
