package storage

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// TestWrittenBytesAreNotKeptByTheWriter: after a write, the log holds the
// caller's entry bytes nowhere, and the records it stored only in its tail
// cache: once the server's budget takes them out of the cache for another
// log, their memory is free, though the log is not written again (an idle
// stream). Before, the writer's scratch lists kept the last write's entry
// bytes and its cached records reachable for as long as the log lived:
// memory outside the tail-cache budget, up to a write's size per stream.
func TestWrittenBytesAreNotKeptByTheWriter(t *testing.T) {
	fs := vfs.NewMem()
	b := NewTailBudget(8 * mib)
	idle := budgetLog(t, fs, 1, b)
	defer idle.Close()

	freed := make(chan string, 4)
	write := func(index uint64, body int) {
		data := userData(kbatch(1, body, 0))
		runtime.AddCleanup(&data[0], func(what string) { freed <- what }, "entry bytes")
		require.NoError(t, idle.Write([]*pb.Entry{ent(index, 1, data)}, nil))
		ce, ok := idle.cache.get(index)
		require.True(t, ok)
		runtime.AddCleanup(&ce.data[0], func(what string) { freed <- what }, "cached record")
	}
	write(1, 256<<10) // a record of its own piece
	write(2, 1<<10)   // one sharing the write's buffer
	_, err := idle.Sync()
	require.NoError(t, err)

	hot := budgetLog(t, fs, 2, b)
	defer hot.Close()
	fillLog(&testing.B{}, hot, 16<<10, 12*mib)
	require.Zero(t, idle.cache.bytes, "the budget took the idle log's records out of its cache")

	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < 4 {
		runtime.GC()
		select {
		case what := <-freed:
			got = append(got, what)
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			require.FailNow(t, "memory still reachable", "freed only %v of 2 entry bytes and 2 cached records", got)
		}
	}
	require.ElementsMatch(t, []string{"entry bytes", "entry bytes", "cached record", "cached record"}, got)
}
