package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/vfs"
)

func TestNewLogIsEmpty(t *testing.T) {
	l := openMem(t, memOpts(vfs.NewMem()))
	defer l.Close()
	fi, _ := l.FirstIndex()
	li, _ := l.LastIndex()
	require.Equal(t, uint64(1), fi)
	require.Equal(t, uint64(0), li)
	term, err := l.Term(0)
	require.NoError(t, err)
	require.Zero(t, term)
	_, err = l.Term(1)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	require.Zero(t, l.StartOffset())
	require.Zero(t, l.EndOffset())
	hs, cs, err := l.InitialState()
	require.NoError(t, err)
	require.True(t, raft.IsEmptyHardState(hs))
	require.Empty(t, cs.GetVoters())
	snap, err := l.Snapshot()
	require.NoError(t, err)
	require.True(t, raft.IsEmptySnap(snap))
}

func TestBootstrapDurable(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, memOpts(mem))
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	require.Error(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1}}))
	mem.CrashClean()
	l = openMem(t, memOpts(mem))
	_, cs, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
	snap, _ := l.Snapshot()
	require.Equal(t, []uint64{1, 2, 3}, snap.GetMetadata().GetConfState().GetVoters())
}

func TestWriteSyncReadBack(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, memOpts(mem))
	ents := []*pb.Entry{
		{Term: new(uint64(1)), Index: new(uint64(1))}, // leader no-op: no Type, nil Data
		userEnt(2, 1, 3, 10, 100),
		ent(3, 1, []byte{TagCommand, 9, 9}),
		{Term: new(uint64(1)), Index: new(uint64(4)), Type: pb.EntryConfChangeV2.Enum(), Data: []byte{1, 2, 3}},
		{Term: new(uint64(2)), Index: new(uint64(5)), Type: pb.EntryConfChange.Enum(), Data: []byte{}},
		ent(6, 2, userData(kbatch(2, 5, 50), kbatch(4, 0, 200))),
	}
	orig := proto.Clone(ents[1]).(*pb.Entry)
	require.NoError(t, l.Write(ents, hardState(2, 1, 3)))
	require.True(t, proto.Equal(orig, ents[1]), "caller's entry must not be mutated")
	s, err := l.Sync()
	require.NoError(t, err)
	require.Equal(t, Synced{LastIndex: 6, LastTerm: 2}, s)

	check := func(l *Log) {
		got, err := l.Entries(1, 7, 1<<30)
		require.NoError(t, err)
		require.Len(t, got, 6)
		for i, e := range got {
			want := proto.Clone(ents[i]).(*pb.Entry)
			if i == 5 { // stamped offsets: entry 2 took 0..2, entry 6 takes 3..4 and 5..8
				require.Equal(t, []int64{3, 5}, stampedBaseOffsets(e.Data[1:]))
				stampBatches(want.Data[1:], 3)
			}
			require.True(t, proto.Equal(want, e), "entry %d: %v vs %v", i+1, want, e)
		}
		require.Equal(t, int64(9), l.EndOffset())
		b, n, err := l.EntryOffsets(2)
		require.NoError(t, err)
		require.Equal(t, [2]int64{0, 3}, [2]int64{b, n})
		b, n, err = l.EntryOffsets(3)
		require.NoError(t, err)
		require.Equal(t, [2]int64{3, 3}, [2]int64{b, n})
		for idx, want := range map[uint64]int64{0: 0, 1: 0, 2: 3, 3: 3, 5: 3, 6: 9} {
			got, err := l.NextOffsetAt(idx)
			require.NoError(t, err)
			require.Equal(t, want, got, "NextOffsetAt(%d)", idx)
		}
		_, err = l.NextOffsetAt(7)
		require.ErrorIs(t, err, ErrOutOfRange)
		batches, err := l.Read(0, 9, 1<<20)
		require.NoError(t, err)
		require.Len(t, batches, 2)
		require.Equal(t, Batch{BaseOffset: 0, NextOffset: 3, Data: got[1].Data[1:]}, batches[0])
		require.Equal(t, int64(3), batches[1].BaseOffset)
		require.Equal(t, []int64{3, 5}, stampedBaseOffsets(batches[1].Data))
		hs, _, err := l.InitialState()
		require.NoError(t, err)
		require.True(t, proto.Equal(hardState(2, 1, 3), hs))
	}
	check(l)
	require.NoError(t, l.Close())
	require.ErrorIs(t, l.Close(), ErrClosed)
	_, err = l.Entries(1, 2, 100)
	require.ErrorIs(t, err, ErrClosed)
	l = openMem(t, memOpts(mem)) // reopen after Close
	check(l)
	mem.CrashClean() // and after a crash that keeps only what was synced
	l = openMem(t, memOpts(mem))
	check(l)
}

func TestBadEntries(t *testing.T) {
	l := openMem(t, memOpts(vfs.NewMem()))
	good := kbatch(1, 4, 1)
	short := append([]byte(nil), good[:40]...)
	badMagic := append([]byte(nil), good...)
	badMagic[kbMagic] = 1
	badLen := append([]byte(nil), good...)
	badLen[kbLength+3]++
	negDelta := append([]byte(nil), good...)
	copy(negDelta[kbLastOffsetDelta:], []byte{0xff, 0xff, 0xff, 0xff})
	for name, data := range map[string][]byte{
		"empty": {TagUser}, "short": userData(short), "magic": userData(badMagic),
		"length": userData(badLen), "delta": userData(negDelta), "trailing": append(userData(good), 1, 2),
	} {
		err := l.Write([]*pb.Entry{ent(1, 1, data)}, nil)
		require.ErrorIs(t, err, ErrBadEntry, name)
	}
	require.Error(t, l.Write([]*pb.Entry{ent(2, 1, nil)}, nil), "gap")
	require.ErrorIs(t, l.Write([]*pb.Entry{ent(1, 1, nil), ent(3, 1, nil)}, nil), ErrBadEntry)
	require.ErrorIs(t, l.Write([]*pb.Entry{ent(1, 2, nil), ent(2, 1, nil)}, nil), ErrBadEntry)
	li, _ := l.LastIndex()
	require.Zero(t, li, "nothing written")
	require.NoError(t, l.Write([]*pb.Entry{ent(1, 1, userData(good))}, nil))
}

// TestRaftSemantics compares Entries/Term/First/Last with raft's own
// MemoryStorage holding the same entries.
func TestRaftSemantics(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 8 << 10
	opts.TailCacheBytes = 4 << 10 // most reads miss the cache
	l := openMem(t, opts)
	var ents []*pb.Entry
	for i := uint64(1); i <= 300; i++ {
		var e *pb.Entry
		switch i % 4 {
		case 0:
			e = ent(i, 1+i/50, nil)
		case 1:
			e = ent(i, 1+i/50, []byte{TagCommand, byte(i)})
		default:
			e = userEnt(i, 1+i/50, int(i%5)+1, int(i%37), int64(i))
		}
		ents = append(ents, e)
	}
	for i := 0; i < len(ents); i += 7 {
		require.NoError(t, l.Write(ents[i:min(i+7, len(ents))], nil))
	}
	_, err := l.Sync()
	require.NoError(t, err)
	stored, err := l.Entries(1, 301, 1<<40)
	require.NoError(t, err)
	ms := raft.NewMemoryStorage()
	require.NoError(t, ms.Append(stored))

	compare := func(l *Log, ms *raft.MemoryStorage) {
		fi, _ := l.FirstIndex()
		mfi, _ := ms.FirstIndex()
		require.Equal(t, mfi, fi)
		li, _ := l.LastIndex()
		mli, _ := ms.LastIndex()
		require.Equal(t, mli, li)
		for i := uint64(0); i <= li+1; i++ {
			a, aerr := l.Term(i)
			b, berr := ms.Term(i)
			require.Equal(t, berr, aerr, "Term(%d)", i)
			require.Equal(t, b, a, "Term(%d)", i)
		}
		for _, lo := range []uint64{0, 1, 2, fi - 1, fi, fi + 1, 100, 299, li} {
			for _, hi := range []uint64{lo + 1, lo + 2, lo + 10, lo + 100, li + 1} {
				if hi > li+1 || lo >= hi || lo == 0 {
					continue
				}
				for _, max := range []uint64{0, 50, 200, 1000, 5000, 1 << 40} {
					a, aerr := l.Entries(lo, hi, max)
					b, berr := ms.Entries(lo, hi, max)
					require.Equal(t, berr, aerr, "Entries(%d,%d,%d)", lo, hi, max)
					require.Equal(t, len(b), len(a), "Entries(%d,%d,%d)", lo, hi, max)
					for k := range a {
						require.True(t, proto.Equal(b[k], a[k]))
					}
				}
			}
		}
	}
	compare(l, ms)
	// Retention: raft sees a compacted log.
	l.SetApplied(300)
	_, err = l.Sync()
	require.NoError(t, err)
	n, err := l.DeleteBefore(200)
	require.NoError(t, err)
	require.Greater(t, n, 0)
	fi, _ := l.FirstIndex()
	require.NoError(t, ms.Compact(fi-1))
	compare(l, ms)
	_, err = l.Entries(fi-1, fi+1, 1<<20)
	require.ErrorIs(t, err, raft.ErrCompacted)
	snap, err := l.Snapshot()
	require.NoError(t, err)
	si := snap.GetMetadata().GetIndex()
	require.GreaterOrEqual(t, si, fi-1, "a snapshot is taken at the applied index, never before the log start")
	last, _ := l.LastIndex()
	require.Equal(t, min(l.Applied(), last), si)
	mt, _ := ms.Term(si)
	require.Equal(t, mt, snap.GetMetadata().GetTerm())
	require.NoError(t, l.Close())
	compare(openMem(t, opts), ms)
}

func TestTruncationRecomputesOffsets(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, memOpts(mem))
	require.NoError(t, l.Write([]*pb.Entry{
		userEnt(1, 1, 5, 10, 1), userEnt(2, 1, 5, 10, 2), userEnt(3, 1, 5, 10, 3), userEnt(4, 1, 5, 10, 4),
	}, hardState(1, 1, 1)))
	_, err := l.Sync()
	require.NoError(t, err)
	require.Equal(t, int64(20), l.EndOffset())
	// A new leader (term 2) overwrites from index 3 with smaller batches.
	require.NoError(t, l.Write([]*pb.Entry{userEnt(3, 2, 2, 3, 30)}, hardState(2, 2, 1)))
	li, _ := l.LastIndex()
	require.Equal(t, uint64(3), li)
	require.Equal(t, int64(12), l.EndOffset())
	got, err := l.Entries(3, 4, 1<<20)
	require.NoError(t, err)
	require.Equal(t, []int64{10}, stampedBaseOffsets(got[0].Data[1:]))
	_, err = l.Entries(3, 5, 1<<20)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	require.NoError(t, l.Write([]*pb.Entry{userEnt(4, 2, 1, 3, 40)}, nil))
	_, err = l.Sync()
	require.NoError(t, err)
	for _, reopen := range []bool{false, true} {
		if reopen {
			require.NoError(t, l.Close())
			mem.CrashClean()
			l = openMem(t, memOpts(mem))
		}
		require.Equal(t, int64(13), l.EndOffset())
		b, err := l.Read(10, 13, 1<<20)
		require.NoError(t, err)
		require.Len(t, b, 2)
		require.Equal(t, int64(12), b[1].BaseOffset)
		term, _ := l.Term(3)
		require.Equal(t, uint64(2), term)
		hs, _, _ := l.InitialState()
		require.Equal(t, uint64(2), hs.GetTerm())
	}
	// Truncating to the very start of the log.
	require.NoError(t, l.Write([]*pb.Entry{userEnt(1, 3, 1, 1, 1)}, nil))
	require.Equal(t, int64(1), l.EndOffset())
	_, err = l.Sync()
	require.NoError(t, err)
	require.NoError(t, l.Close())
	mem.CrashClean()
	l = openMem(t, memOpts(mem))
	li, _ = l.LastIndex()
	require.Equal(t, uint64(1), li)
	require.Equal(t, int64(1), l.EndOffset())
}

func TestRollAndBigEntry(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 4 << 10
	l := openMem(t, opts)
	var next uint64 = 1
	write := func(body int) {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(next, 1, 1, body, int64(next))}, nil))
		next++
	}
	for range 50 {
		write(300)
	}
	write(20 << 10) // bigger than a segment
	write(10)
	_, err := l.Sync()
	require.NoError(t, err)
	names, _ := mem.List(opts.Dir)
	segs := 0
	for _, n := range names {
		if _, ok := parseSegName(n); ok {
			segs++
		}
	}
	require.Greater(t, segs, 5)
	verify := func(l *Log) {
		got, err := l.Entries(1, next, 1<<30)
		require.NoError(t, err)
		require.Len(t, got, int(next-1))
		for i, e := range got {
			require.Equal(t, []int64{int64(i)}, stampedBaseOffsets(e.Data[1:]))
		}
		b, err := l.Read(0, int64(next-1), 1<<30)
		require.NoError(t, err)
		require.Len(t, b, int(next-1))
		if len(b) > 50 {
			require.Len(t, b[50].Data, kbHeaderSize+20<<10)
		}
	}
	verify(l)
	require.NoError(t, l.Close())
	l = openMem(t, opts)
	verify(l)
	// Truncate back into a closed segment, then continue.
	require.NoError(t, l.Write([]*pb.Entry{userEnt(5, 2, 1, 7, 5)}, nil))
	next = 6
	_, err = l.Sync()
	require.NoError(t, err)
	verify(l)
	mem.CrashClean()
	l = openMem(t, opts)
	verify(l)
	li, _ := l.LastIndex()
	require.Equal(t, uint64(5), li)
}

func TestRetention(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 4 << 10
	l := openMem(t, opts)
	require.NoError(t, l.ApplyConfState(0, &pb.ConfState{Voters: []uint64{1}}))
	for i := uint64(1); i <= 100; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 2, 200, int64(i))}, hardState(1, 1, i)))
	}
	n, err := l.DeleteBefore(150)
	require.NoError(t, err)
	require.Zero(t, n, "nothing applied yet")
	require.NoError(t, l.ApplyConfState(40, &pb.ConfState{Voters: []uint64{1, 2}}))
	l.SetApplied(100)
	_, err = l.Sync()
	require.NoError(t, err)
	n, err = l.DeleteBefore(1 << 40)
	require.NoError(t, err)
	require.Greater(t, n, 3)
	fi, _ := l.FirstIndex()
	li, _ := l.LastIndex()
	require.Equal(t, uint64(100), li)
	require.Greater(t, fi, uint64(50), "only the active segment is left")
	start := l.StartOffset()
	require.Equal(t, l.EndOffset(), start, "the retention point is the requested offset, clamped to the log end")
	require.LessOrEqual(t, int64(2*(fi-1)), start, "whole segments below it are gone")
	_, err = l.Read(start-1, 200, 100)
	require.ErrorIs(t, err, ErrOutOfRange)
	require.NoError(t, l.Write([]*pb.Entry{userEnt(101, 1, 2, 200, 101)}, nil))
	_, err = l.Entries(fi-1, fi, 100)
	require.ErrorIs(t, err, raft.ErrCompacted)
	_, err = l.Term(fi - 2)
	require.ErrorIs(t, err, raft.ErrCompacted)
	b, err := l.Read(start, l.EndOffset(), 1)
	require.NoError(t, err)
	require.Len(t, b, 1)
	snap, _ := l.Snapshot()
	require.Equal(t, []uint64{1, 2}, snap.GetMetadata().GetConfState().GetVoters())
	n, err = l.DeleteBefore(start)
	require.NoError(t, err)
	require.Zero(t, n, "never the active segment")
	mem.CrashClean()
	l = openMem(t, opts)
	fi2, _ := l.FirstIndex()
	require.Equal(t, fi, fi2)
	require.Equal(t, start, l.StartOffset())
	hs, cs, _ := l.InitialState()
	require.Equal(t, uint64(100), hs.GetCommit(), "hard state survives head deletion")
	require.Equal(t, []uint64{1, 2}, cs.GetVoters())
	require.Equal(t, uint64(100), l.Applied())
}

func TestReadLimits(t *testing.T) {
	l := openMem(t, memOpts(vfs.NewMem()))
	for i := uint64(1); i <= 10; i++ { // entry i: offsets 10(i-1) .. 10i, 100+61 bytes
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 10, 100, int64(i)), ent(i+100, 1, nil)}[:1], nil))
	}
	size := kbHeaderSize + 100
	hwm, err := l.NextOffsetAt(5)
	require.NoError(t, err)
	require.Equal(t, int64(50), hwm)
	for _, disk := range []bool{false, true} {
		read := l.Read
		if disk {
			read = l.readDisk
		}
		b, err := read(15, hwm, 1) // inside entry 2; at least one entry
		require.NoError(t, err)
		require.Len(t, b, 1)
		require.Equal(t, int64(10), b[0].BaseOffset)
		b, err = read(15, hwm, 2*size)
		require.NoError(t, err)
		require.Len(t, b, 2)
		b, err = read(15, hwm, 100*size)
		require.NoError(t, err)
		require.Len(t, b, 4, "stops before hwm")
		require.Equal(t, int64(50), b[3].NextOffset)
	}
	b, err := l.Read(50, hwm, 100)
	require.NoError(t, err)
	require.Empty(t, b)
	_, err = l.Read(51, hwm, 100)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = l.Read(-1, hwm, 100)
	require.ErrorIs(t, err, ErrOutOfRange)
}

func TestOffsetForTime(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 2 << 10
	l := openMem(t, opts)
	ts := []int64{10, 20, 15, 30, 30, 50, 40, 60}
	for i, x := range ts {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(uint64(i+1), 1, 2, 300, x)}, nil))
	}
	check := func(l *Log) {
		for q, want := range map[int64]int64{0: 0, 10: 0, 11: 2, 20: 2, 21: 6, 30: 6, 31: 10, 45: 10, 50: 10, 51: 14, 60: 14, 61: 16} {
			got, err := l.OffsetForTime(q)
			require.NoError(t, err)
			require.Equal(t, want, got, "ts %d", q)
		}
	}
	check(l)
	_, err := l.Sync()
	require.NoError(t, err)
	require.NoError(t, l.Close())
	check(openMem(t, opts))
}

func TestTailCache(t *testing.T) {
	cfs := &countFS{FS: vfs.NewMem()}
	opts := memOpts(cfs)
	opts.SegmentSize = 1 << 20
	opts.TailCacheBytes = 64 << 10
	l := openMem(t, opts)
	for i := uint64(1); i <= 200; i++ { // ~1 KiB each: the cache holds the newest ~60
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 1000, int64(i))}, nil))
	}
	_, err := l.Sync()
	require.NoError(t, err)
	end := l.EndOffset()
	before := cfs.reads.Load()
	b, err := l.Read(end-10, end, 1<<20)
	require.NoError(t, err)
	require.Len(t, b, 10)
	ents, err := l.Entries(190, 201, 1<<20)
	require.NoError(t, err)
	require.Len(t, ents, 11)
	require.Equal(t, before, cfs.reads.Load(), "tail reads hit the cache")
	// A catch-up read goes to disk and does not evict the tail.
	b, err = l.Read(0, end, 1<<20)
	require.NoError(t, err)
	require.Len(t, b, 200)
	require.Greater(t, cfs.reads.Load(), before)
	before = cfs.reads.Load()
	_, err = l.Read(end-10, end, 1<<20)
	require.NoError(t, err)
	require.Equal(t, before, cfs.reads.Load(), "tail still cached")
}

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

func TestConcurrentReaders(t *testing.T) {
	opts := memOpts(vfs.NewMem())
	opts.SegmentSize = 8 << 10
	opts.TailCacheBytes = 8 << 10
	l := openMem(t, opts)
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 3 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				li, _ := l.LastIndex()
				if li == 0 {
					continue
				}
				if _, err := l.Entries(max(1, li-uint64(r*20)), li+1, 1<<20); err != nil && !errors.Is(err, raft.ErrCompacted) {
					errs <- err
					return
				}
				// Retention may overtake a slow reader: li can be deleted
				// between its calls, which must be reported, not misread.
				if _, err := l.Term(li); err != nil {
					if errors.Is(err, raft.ErrCompacted) {
						continue
					}
					errs <- err
					return
				}
				hwm, err := l.NextOffsetAt(li)
				if errors.Is(err, ErrOutOfRange) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := l.Read(max(l.StartOffset(), hwm-int64(r*50)), hwm, 4096); err != nil && !errors.Is(err, ErrOutOfRange) {
					errs <- err
					return
				}
			}
		}()
	}
	for i := uint64(1); i <= 2000; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 2, 100, int64(i))}, nil))
		if i%10 == 0 {
			_, err := l.Sync()
			require.NoError(t, err)
			l.SetApplied(i)
		}
		if i%500 == 0 {
			_, err := l.DeleteBefore(int64(i))
			require.NoError(t, err)
		}
	}
	close(done)
	for range 3 {
		require.NoError(t, <-errs)
	}
}

func TestRecordFormatIsDeterministic(t *testing.T) {
	run := func() []byte {
		mem := vfs.NewMem()
		l := openMem(t, memOpts(mem))
		require.NoError(t, l.Write([]*pb.Entry{userEnt(1, 1, 3, 10, 5), ent(2, 1, nil)}, hardState(1, 1, 1)))
		_, err := l.Sync()
		require.NoError(t, err)
		f, err := mem.Open("/data/s1/00000000000000000001.seg")
		require.NoError(t, err)
		b := make([]byte, 4096)
		_, err = f.ReadAt(b, 0)
		require.NoError(t, err)
		return b
	}
	require.True(t, bytes.Equal(run(), run()))
}

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
			require.Equal(t, mine[i][9:], e.Data[9:], "entry %d (after tag and stamped base offset)", i+2)
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
