package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/kafka/batchfmt"
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
			if i == 1 { // stamped offset and leader epoch (the term)
				StampBatches(want.Data[1:], 0, want.GetTerm())
			}
			if i == 5 { // stamped offsets: entry 2 took 0..2, entry 6 takes 3..4 and 5..8
				require.Equal(t, []int64{3, 5}, stampedBaseOffsets(e.Data[1:]))
				StampBatches(want.Data[1:], 3, want.GetTerm())
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
	badMagic[batchfmt.OffMagic] = 1
	badLen := append([]byte(nil), good...)
	badLen[batchfmt.OffBatchLength+3]++
	negDelta := append([]byte(nil), good...)
	copy(negDelta[batchfmt.OffLastOffsetDelta:], []byte{0xff, 0xff, 0xff, 0xff})
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
			require.Len(t, b[50].Data, batchfmt.HeaderSize+20<<10)
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
	size := batchfmt.HeaderSize + 100
	hwm, err := l.NextOffsetAt(5)
	require.NoError(t, err)
	require.Equal(t, int64(50), hwm)
	for _, disk := range []bool{false, true} {
		read := l.Read
		if disk {
			read = func(offset, hwm int64, maxBytes int) ([]Batch, error) {
				bs, _, err := l.readDisk(offset, hwm, maxBytes, true)
				return bs, err
			}
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
