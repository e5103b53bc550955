package storage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// Snapshot installs and the retention point.

// An install that fails part way (the source dies) must leave a log raft
// can restart from: commit never beyond the last index.
func TestInterruptedInstallKeepsCommitInRange(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	l := openMem(t, opts)
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	for i := uint64(2); i <= 300; i++ { // committed far beyond where the copy will stop
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 10, int64(i))}, hardState(1, 1, i)))
	}
	_, err := l.Sync()
	require.NoError(t, err)

	// A leader's snapshot at 400 whose log starts at 100 (it deleted 2..99).
	d := snapDesc{first: 100, prevTerm: 2, start: 98, confs: []confEntry{{index: 99, cs: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
	data, err := d.encode()
	require.NoError(t, err)
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(400)), Term: new(uint64(2)),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: data}
	calls := 0
	err = l.InstallSnapshot(snap, func(from, to uint64) ([]*pb.Entry, uint64, error) {
		calls++
		if calls > 1 {
			return nil, 0, errors.New("source died")
		}
		var ents []*pb.Entry
		for i := from; i < from+10; i++ {
			ents = append(ents, userEnt(i, 2, 1, 10, int64(i)))
		}
		return ents, 2, nil
	})
	require.ErrorContains(t, err, "source died")
	require.NoError(t, l.Close())

	for _, crash := range []func(){func() {}, mem.CrashClean} {
		crash()
		l = openMem(t, opts)
		hs, _, err := l.InitialState()
		require.NoError(t, err)
		fi, _ := l.FirstIndex()
		li, _ := l.LastIndex()
		require.Equal(t, uint64(100), fi, "the log restarts where the leader's starts")
		require.LessOrEqual(t, hs.GetCommit(), li, "commit within the log")
		require.GreaterOrEqual(t, hs.GetCommit(), fi-1)
		require.NoError(t, l.Close())
	}
}

// A replica that holds a prefix of the leader's log keeps it through a
// snapshot install, even one interrupted by a crash: it may have
// acknowledged those entries, and forgetting them could lose committed data.
func TestInstallKeepsTheMatchingPrefix(t *testing.T) {
	for _, interrupted := range []bool{true, false} {
		mem := vfs.NewMem()
		opts := memOpts(mem)
		l := openMem(t, opts)
		require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
		var mine [][]byte
		for i := uint64(2); i <= 300; i++ { // acknowledged: durable
			e := userEnt(i, 1, 1, 10, int64(i))
			mine = append(mine, e.Data)
			require.NoError(t, l.Write([]*pb.Entry{e}, hardState(1, 1, i-1)))
		}
		_, err := l.Sync()
		require.NoError(t, err)

		// The leader's log: the same entries (term 1) to 350, then term 2 to
		// 400; it starts at 100. Its snapshot is at 400.
		term := func(i uint64) uint64 { return map[bool]uint64{true: 1, false: 2}[i <= 350] }
		d := snapDesc{first: 100, prevTerm: 1, start: 98, confs: []confEntry{{index: 1, cs: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
		data, err := d.encode()
		require.NoError(t, err)
		snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(400)), Term: new(uint64(2)),
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: data}
		copied := 0
		err = l.InstallSnapshot(snap, func(from, to uint64) ([]*pb.Entry, uint64, error) {
			var ents []*pb.Entry
			for i := from; i <= min(to, from+19); i++ {
				ents = append(ents, userEnt(i, term(i), 1, 10, int64(i)))
			}
			if len(ents) > 1 { // a copy, not a term probe
				copied += len(ents)
				if interrupted && copied > 40 {
					return nil, 0, errors.New("source died")
				}
			}
			return ents, term(from - 1), nil
		})
		if interrupted {
			require.ErrorContains(t, err, "source died")
		} else {
			require.NoError(t, err)
		}
		require.NoError(t, l.Close())
		mem.CrashClean()

		l = openMem(t, opts)
		fi, _ := l.FirstIndex()
		li, _ := l.LastIndex()
		hs, _, err := l.InitialState()
		require.NoError(t, err)
		require.Equal(t, uint64(2), fi, "our prefix is kept")
		require.GreaterOrEqual(t, li, uint64(300), "nothing acknowledged is lost")
		require.LessOrEqual(t, hs.GetCommit(), li)
		ents, err := l.Entries(2, 301, 1<<30)
		require.NoError(t, err)
		for i, e := range ents {
			require.Equal(t, mine[i][17:], e.Data[17:], "entry %d (after tag, stamped base offset, length and leader epoch)", i+2)
		}
		if !interrupted {
			require.Equal(t, uint64(400), li)
			tm, err := l.Term(400)
			require.NoError(t, err)
			require.Equal(t, uint64(2), tm)
			require.Equal(t, uint64(400), hs.GetCommit())
		}
		require.NoError(t, l.Close())
	}
}

// Retention policies delete the oldest closed, committed segments: those
// wholly older than MaxAge, and those beyond the newest MaxBytes.
func TestRetentionPoint(t *testing.T) {
	segs := []SegmentInfo{
		{FirstOffset: 0, EndOffset: 10, Bytes: 100, MaxTimestamp: 1000},
		{FirstOffset: 10, EndOffset: 20, Bytes: 100, MaxTimestamp: 2000},
		{FirstOffset: 20, EndOffset: 30, Bytes: 100, MaxTimestamp: 3000},
		{FirstOffset: 30, EndOffset: 35, Bytes: 50, MaxTimestamp: 4000, Active: true},
	}
	require.Zero(t, RetentionPoint(segs, RetentionPolicy{}, 10000, 35), "no policy")
	require.Equal(t, int64(20), RetentionPoint(segs, RetentionPolicy{MaxAge: 1500}, 4000, 35), "older than 2500")
	require.Equal(t, int64(30), RetentionPoint(segs, RetentionPolicy{MaxAge: 1}, 1e9, 35), "never the active segment")
	require.Equal(t, int64(10), RetentionPoint(segs, RetentionPolicy{MaxAge: 1}, 1e9, 15), "never past the high watermark")
	require.Equal(t, int64(10), RetentionPoint(segs, RetentionPolicy{MaxBytes: 250}, 0, 35), "keeps at least 250 bytes")
	require.Equal(t, int64(20), RetentionPoint(segs, RetentionPolicy{MaxBytes: 150}, 0, 35))

	// On a real log: segments of the right sizes and timestamps.
	l := openMem(t, memOpts(vfs.NewMem()))
	defer l.Close()
	for i := uint64(1); i <= 200; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 1000, int64(i))}, hardState(1, 1, i)))
	}
	ss := l.Segments()
	require.Greater(t, len(ss), 2)
	require.True(t, ss[len(ss)-1].Active)
	before := RetentionPoint(ss, RetentionPolicy{MaxAge: 50}, 200, l.EndOffset())
	require.Positive(t, before)
	require.Less(t, before, int64(200-50+1), "only records older than 50 ms")
	_, err := l.DeleteBefore(before)
	require.NoError(t, err)
	require.Equal(t, before, l.StartOffset())
}

// A snapshot install copies only committed entries, and each chunk must
// continue what it holds: a replica never serves the uncommitted suffix an
// old leader left it (CommittedEntries stops at its commit index), and a
// chunk whose previous term differs from the log being built is refused
// (ErrDiverged) instead of spliced in. (The entries endpoint used to serve
// up to the last index, from any replica, with only the snapshot index's
// term checked.)
func TestInstallTakesOnlyCommittedContinuousEntries(t *testing.T) {
	src := openMem(t, memOpts(vfs.NewMem()))
	defer src.Close()
	require.NoError(t, src.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	for i := uint64(2); i <= 40; i++ { // committed up to 30; 31..40 an old leader's suffix
		require.NoError(t, src.Write([]*pb.Entry{userEnt(i, 1, 1, 10, int64(i))}, hardState(1, 1, min(i, 30))))
	}
	ents, prev, err := src.CommittedEntries(20, 40, 1<<20)
	require.NoError(t, err)
	require.Equal(t, uint64(30), ents[len(ents)-1].GetIndex(), "never past the commit index")
	require.Equal(t, uint64(1), prev)
	_, _, err = src.CommittedEntries(31, 40, 1<<20)
	require.ErrorIs(t, err, ErrNotCommitted)
	_, _, err = src.CommittedEntries(1, 40, 1<<20)
	require.ErrorIs(t, err, ErrOutOfRange, "below the log start")

	// An install whose second chunk comes from a replica with another
	// history (its entry before the chunk has another term).
	dst := openMem(t, memOpts(vfs.NewMem()))
	defer dst.Close()
	d := snapDesc{first: 2, prevTerm: 1, confs: []confEntry{{index: 1, cs: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
	data, err := d.encode()
	require.NoError(t, err)
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(30)), Term: new(uint64(1)),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: data}
	calls := 0
	err = dst.InstallSnapshot(snap, func(from, to uint64) ([]*pb.Entry, uint64, error) {
		calls++
		ents, prev, err := src.CommittedEntries(from, min(to, from+9), 1<<20)
		if calls == 2 {
			prev = 7 // another history
		}
		return ents, prev, err
	})
	require.ErrorIs(t, err, ErrDiverged)
	li, _ := dst.LastIndex()
	require.Equal(t, uint64(11), li, "the first chunk stays, the diverging one is not written")
}

// An install whose matching prefix holds a membership change this replica
// wrote but had not applied yet (it was behind on its commit) takes the
// change from the snapshot: the membership in force after the install is
// the snapshot's, also after a crash (simulator seed 1463 with quiescence:
// a replica restarted with the membership before a promotion it had
// installed, and would have counted the wrong quorum).
func TestInstallAdoptsMembershipChangesInTheMatchingPrefix(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	l := openMem(t, opts)
	before := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	after := &pb.ConfState{Voters: []uint64{1, 2, 3, 4}}
	require.NoError(t, l.Bootstrap(before))
	for i := uint64(2); i <= 300; i++ { // written, committed only to 100: the change at 150 is not applied here
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 10, int64(i))}, hardState(1, 1, min(i, 100))))
	}
	_, err := l.Sync()
	require.NoError(t, err)

	// The leader applied the change at 150; its log starts at 100.
	d := snapDesc{first: 100, prevTerm: 1, start: 98, confs: []confEntry{{index: 1, cs: before}, {index: 150, cs: after}}}
	data, err := d.encode()
	require.NoError(t, err)
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(400)), Term: new(uint64(1)), ConfState: after}, Data: data}
	require.NoError(t, l.InstallSnapshot(snap, func(from, to uint64) ([]*pb.Entry, uint64, error) {
		var ents []*pb.Entry
		for i := from; i <= min(to, from+19); i++ {
			ents = append(ents, userEnt(i, 1, 1, 10, int64(i)))
		}
		return ents, 1, nil
	}))
	_, cs, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, after.GetVoters(), cs.GetVoters(), "the snapshot's membership")
	require.NoError(t, l.Close())
	mem.CrashClean()

	l = openMem(t, opts)
	defer l.Close()
	_, cs, err = l.InitialState()
	require.NoError(t, err)
	require.Equal(t, after.GetVoters(), cs.GetVoters(), "after a crash too")
	require.Empty(t, cs.GetLearners())
}
