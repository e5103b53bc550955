package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// panicOf returns what f panicked with ("" if it did not).
func panicOf(f func()) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg = p.(string)
		}
	}()
	f()
	return ""
}

// TestInvariantsCatchBrokenBookkeeping: the write and recovery invariants
// fire on bookkeeping a bug broke, before anything reaches the disk.
func TestInvariantsCatchBrokenBookkeeping(t *testing.T) {
	l := openMem(t, memOpts(vfs.NewMem()))
	require.NoError(t, l.Write([]*pb.Entry{userEnt(1, 1, 2, 10, 1), userEnt(2, 1, 1, 10, 2)}, nil))
	require.Empty(t, panicOf(l.assertRecovered))

	act := l.active()
	act.endOffset++ // offsets that no longer end where the index says
	require.Equal(t, "storage: invariant broken in /data/s1: before a write: the active segment's offsets end at 4, its index says 3",
		panicOf(func() { _ = l.Write([]*pb.Entry{userEnt(3, 1, 1, 10, 3)}, nil) }))
	l.ridx[1].base++ // now a gap in the offsets between entries 1 and 2
	require.Contains(t, panicOf(l.assertRecovered), "after recovery: entry 2 (offset 3, term 1, at 272) does not continue offset 2")
}
