package storage

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/vfs"
)

// Recovery at Open: corruption, torn tails, index files rebuilt, durable
// hard state.

func TestCorruptionInTheMiddle(t *testing.T) {
	for _, tc := range []string{"last", "closed", "closed-no-index"} {
		mem := vfs.NewMem()
		opts := memOpts(mem)
		opts.SegmentSize = 4 << 10
		l := openMem(t, opts)
		for i := uint64(1); i <= 40; i++ {
			require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 200, 1)}, nil))
		}
		_, err := l.Sync()
		require.NoError(t, err)
		require.NoError(t, l.Close())
		l.mu.RLock()
		s := l.segs[0]
		if tc == "last" {
			s = l.segs[len(l.segs)-1]
		}
		seg, first := s.base+".seg", s.hdr.first
		l.mu.RUnlock()
		if tc == "closed-no-index" {
			require.NoError(t, mem.Remove(s.base+".ridx"))
		}
		f, err := mem.Open(seg)
		require.NoError(t, err)
		pos := int64(segHeaderSize + recSize(stateSize) + recHeaderSize + 10) // payload of the first entry
		var b [1]byte
		_, err = f.ReadAt(b[:], pos)
		require.NoError(t, err)
		b[0] ^= 0xff
		_, err = f.WriteAt(b[:], pos)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		l, err = Open(opts)
		if tc == "closed" {
			// Index files vouch for a closed segment at Open; its records
			// are checked when read.
			require.NoError(t, err)
			_, err = l.Entries(first, first+1, 1<<20)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), seg)
			_, err = l.Read(0, 40, 1<<20)
			require.ErrorIs(t, err, ErrCorrupt)
			continue
		}
		require.ErrorIs(t, err, ErrCorrupt, tc)
		require.Contains(t, err.Error(), seg)
		require.Contains(t, err.Error(), "at byte 152")
	}
}

func TestTornTailIsCut(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	l := openMem(t, opts)
	for i := uint64(1); i <= 10; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 100, 1)}, nil))
	}
	_, err := l.Sync()
	require.NoError(t, err)
	// Tear the last record by hand: its payload loses a byte.
	l.mu.RLock()
	f, pos := l.active().f, l.ridx[9].pos
	l.mu.RUnlock()
	_, err = f.WriteAt([]byte{0xAA}, pos+recHeaderSize+5)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, l.Close())
	l = openMem(t, opts)
	li, _ := l.LastIndex()
	require.Equal(t, uint64(9), li)
	require.Equal(t, int64(9), l.EndOffset())
	require.NoError(t, l.Write([]*pb.Entry{userEnt(10, 1, 1, 3, 1)}, nil))
	_, err = l.Sync()
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l = openMem(t, opts)
	li, _ = l.LastIndex()
	require.Equal(t, uint64(10), li)
}

func TestBadIndexFileRebuilt(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 4 << 10
	l := openMem(t, opts)
	for i := uint64(1); i <= 40; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 200, int64(i))}, nil))
	}
	_, err := l.Sync()
	require.NoError(t, err)
	l.mu.RLock()
	base0, base1 := l.segs[0].base, l.segs[1].base
	l.mu.RUnlock()
	require.NoError(t, l.Close())
	// Damage one index file, remove another.
	f, err := mem.Open(base0 + ".ridx")
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff, 0xff}, ridxHeaderSize+3)
	require.NoError(t, err)
	require.NoError(t, mem.Remove(base1+".lidx"))
	l = openMem(t, opts)
	got, err := l.Entries(1, 41, 1<<30)
	require.NoError(t, err)
	require.Len(t, got, 40)
	b, err := l.Read(0, 40, 1<<30)
	require.NoError(t, err)
	require.Len(t, b, 40)
	size, err := mem.Stat(base1 + ".lidx")
	require.NoError(t, err)
	require.Greater(t, size, int64(lidxHeaderSize))
}

func TestAppliedAndHardStateDurability(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, memOpts(mem))
	require.NoError(t, l.Write([]*pb.Entry{ent(1, 1, nil), ent(2, 1, nil)}, hardState(1, 1, 2)))
	l.SetApplied(2)
	_, err := l.Sync()
	require.NoError(t, err)
	require.Equal(t, uint64(2), l.Applied())
	l.SetApplied(5) // never synced
	require.NoError(t, l.Write(nil, hardState(3, 0, 2)))
	mem.CrashClean()
	l = openMem(t, memOpts(mem))
	require.Equal(t, uint64(2), l.Applied())
	hs, _, _ := l.InitialState()
	require.True(t, proto.Equal(hardState(1, 1, 2), hs))
}

// A membership change applied (its record durable on its own) while the
// hard state that committed it was not synced: whatever a crash keeps of
// the writes after it, the restart finds commit >= applied (raft panics
// otherwise), and keeps finding it. The case this once broke — the active
// segment without a state record of its own, given the previous one's by
// recovery, which overwrote the raise — is simulator seed 2204
// (testcases/sim-seeds.txt); these random crashes do not reach it.
func TestRecoveryCommitsAnAppliedConfChange(t *testing.T) {
	tornState := 0
	for seed := range uint64(300) {
		mem := vfs.NewMem()
		l := openMem(t, memOpts(mem))
		require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
		require.NoError(t, l.Write([]*pb.Entry{userEnt(2, 1, 1, 10, 2)}, hardState(1, 1, 2)))
		conf := uint64(3)
		require.NoError(t, l.Write([]*pb.Entry{ent(conf, 1, nil)}, nil))
		_, err := l.Sync()
		require.NoError(t, err)
		require.NoError(t, l.ApplyConfState(conf, &pb.ConfState{Voters: []uint64{1, 2}}))
		// Entries that roll into new segments, with the hard state that
		// commits the change last: never synced.
		var ents []*pb.Entry
		for i := conf + 1; i < conf+12; i++ {
			ents = append(ents, userEnt(i, 1, 1, 8<<10, int64(i)))
		}
		require.NoError(t, l.Write(ents, hardState(1, 1, conf+11)))
		mem.Crash(rand.New(rand.NewPCG(seed, 7)))

		l = openMem(t, memOpts(mem))
		hs, cs, err := l.InitialState()
		require.NoError(t, err)
		require.Equal(t, []uint64{1, 2}, cs.GetVoters())
		require.GreaterOrEqual(t, hs.GetCommit(), l.Applied(), "seed %d: raft refuses applied beyond commit", seed)
		if hs.GetCommit() == conf {
			tornState++
		}
		require.NoError(t, l.Close())
		l = openMem(t, memOpts(mem)) // the raise was written down
		hs2, _, err := l.InitialState()
		require.NoError(t, err)
		require.Equal(t, hs.GetCommit(), hs2.GetCommit(), "seed %d", seed)
		require.NoError(t, l.Close())
	}
	require.Positive(t, tornState, "some crash kept entries past the change but not the hard state")
}
