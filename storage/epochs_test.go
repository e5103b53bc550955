package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/vfs"
)

// The leader epoch history comes from the entries' terms: stamped into
// the stored batches, answered by EpochEnd and TermAt, across segments, a
// restart and retention.
func TestLeaderEpochHistory(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 4 << 10
	l := openMem(t, opts)
	// Terms 2 (offsets 0-19), 3 (20-39: no-op first), 5 (40-59): one
	// offset per entry, 300-byte bodies so segments roll.
	var ents []*pb.Entry
	idx := uint64(1)
	for _, term := range []uint64{2, 3, 5} {
		ents = append(ents, &pb.Entry{Term: new(term), Index: new(idx)}) // the new leader's no-op
		idx++
		for range 20 {
			ents = append(ents, userEnt(idx, term, 1, 300, int64(idx)))
			idx++
		}
	}
	require.NoError(t, l.Write(ents, hardState(5, 1, idx-1)))
	_, err := l.Sync()
	require.NoError(t, err)

	check := func(l *Log, retained bool) {
		for _, c := range []struct {
			term  uint64
			floor uint64
			end   int64
		}{{1, 0, 0}, {2, 2, 20}, {3, 3, 40}, {4, 3, 40}, {5, 5, 60}, {9, 5, 60}} {
			floor, end, err := l.EpochEnd(c.term)
			require.NoError(t, err)
			if retained && c.term == 1 {
				// Older than anything stored: where the first stored
				// entry starts (what Kafka answers for an epoch older
				// than its history).
				require.Equal(t, [2]int64{0, l.Segments()[0].FirstOffset}, [2]int64{int64(floor), end})
				continue
			}
			require.Equal(t, [2]int64{int64(c.floor), c.end}, [2]int64{int64(floor), end}, "term %d", c.term)
		}
		for off, want := range map[int64]uint64{25: 3, 39: 3, 40: 5, 59: 5, 60: 0} {
			got, err := l.TermAt(off)
			require.NoError(t, err)
			require.Equal(t, want, got, "offset %d", off)
		}
		bs, err := l.Read(45, 60, 1<<20)
		require.NoError(t, err)
		require.Equal(t, int32(5), batchfmt.LeaderEpoch(bs[0].Data))
	}
	got, err := l.TermAt(3)
	require.NoError(t, err)
	require.Equal(t, uint64(2), got)
	check(l, false)
	require.NoError(t, l.Close())
	l = openMem(t, opts)
	check(l, false)
	l.SetApplied(idx - 1)
	_, err = l.Sync()
	require.NoError(t, err)
	_, err = l.DeleteBefore(22)
	require.NoError(t, err)
	require.Greater(t, l.Segments()[0].FirstOffset, int64(0))
	check(l, true)
	require.NoError(t, l.Close())
	check(openMem(t, opts), true)
}
