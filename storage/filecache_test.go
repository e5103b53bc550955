package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/vfs"
)

// fcOpts is a log of many small segments read from the disk (a tail cache
// of one segment), its closed segments' files in a cache of limit segments.
func fcOpts(fs vfs.FS, dir string, stream uint64, files *FileCache) Options {
	return Options{FS: fs, Dir: dir, Stream: stream, SegmentSize: 4 << 10, TailCacheBytes: 4 << 10, Files: files}
}

// fcWrite writes entries [from, to], entry i one batch of one record
// (offset i-1) with timestamp i, syncing and applying every 10.
func fcWrite(t testing.TB, l *Log, from, to uint64) {
	for i := from; i <= to; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 200, int64(i))}, hardState(1, 1, i)))
		if i%10 == 0 || i == to {
			_, err := l.Sync()
			require.NoError(t, err)
			l.SetApplied(i)
		}
	}
}

// fcBatch is entry i's batch as stored: baseOffset i-1 and the leader
// epoch (fcWrite's term, 1) stamped.
func fcBatch(i uint64) []byte {
	b := kbatch(1, 200, int64(i))
	binary.BigEndian.PutUint64(b[batchfmt.OffBaseOffset:], i-1)
	batchfmt.SetLeaderEpoch(b, 1)
	return b
}

// fcCheckBatches reports whether bs are whole batches of fcWrite's log,
// consecutive, the first holding offset from.
func fcCheckBatches(bs []Batch, from int64) error {
	next := from
	for k, b := range bs {
		if b.BaseOffset != next || b.NextOffset != next+1 {
			return fmt.Errorf("batch %d is offsets [%d, %d), want %d", k, b.BaseOffset, b.NextOffset, next)
		}
		if string(b.Data) != string(fcBatch(uint64(b.BaseOffset)+1)) {
			return fmt.Errorf("batch at offset %d has other data", b.BaseOffset)
		}
		next++
	}
	return nil
}

// fcCheckEntries is fcCheckBatches for raft entries from index lo.
func fcCheckEntries(ents []*pb.Entry, lo uint64) error {
	for k, e := range ents {
		i := lo + uint64(k)
		if e.GetIndex() != i || e.GetTerm() != 1 || string(e.Data) != string(userData(fcBatch(i))) {
			return fmt.Errorf("entry %d: index %d term %d, or other data", i, e.GetIndex(), e.GetTerm())
		}
	}
	return nil
}

// fcReadAll reads the whole log from its start in reads of about maxBytes.
func fcReadAll(t *testing.T, l *Log, maxBytes int) {
	t.Helper()
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		bs, err := l.Read(off, end, maxBytes)
		require.NoError(t, err)
		require.NotEmpty(t, bs)
		require.NoError(t, fcCheckBatches(bs, off))
		off = bs[len(bs)-1].NextOffset
	}
}

// The files of closed segments are opened on demand through the cache:
// however many segments a log has, at most the cache's limit of them have
// their files open (3 each), beside the active segment's file, and every
// read still returns what was written. (Every segment used to keep its
// files open: 3 descriptors per segment for the life of the log.) Reads
// are of 2 KiB, about 8 entries: one holds at most 3 segments at once,
// fewer than the limit (the cache goes over it rather than close files
// a read is using).
func TestFileCacheBoundsOpenFiles(t *testing.T) {
	const limit, n = 4, 600
	cfs := &countFS{FS: vfs.NewMem()}
	opts := fcOpts(cfs, "/data/s1", 7, NewFileCache(limit))
	const bound = 3*limit + 1 // the cached segments' files and the active one's
	check := func(what string) {
		t.Helper()
		open, peak := cfs.handles()
		require.LessOrEqual(t, peak, bound, "%s: at most %d files open at once, %d were", what, bound, peak)
		require.LessOrEqual(t, open, bound, what)
	}

	l := openMem(t, opts)
	fcWrite(t, l, 1, n)
	require.Greater(t, len(l.Segments()), 40)
	check("writing")

	fcReadAll(t, l, 2<<10)
	check("reading from offset 0")

	rng := rand.New(rand.NewPCG(1, 2))
	end := l.EndOffset()
	for range 300 {
		off := rng.Int64N(end)
		bs, err := l.Read(off, end, 1+rng.IntN(2<<10))
		require.NoError(t, err)
		require.NotEmpty(t, bs)
		require.NoError(t, fcCheckBatches(bs, off))
	}
	check("reading at random offsets")

	for range 300 {
		lo := 1 + rng.Uint64N(n)
		hi := lo + 1 + rng.Uint64N(min(60, n+1-lo))
		ents, err := l.Entries(lo, hi, math.MaxUint64)
		require.NoError(t, err)
		require.Len(t, ents, int(hi-lo))
		require.NoError(t, fcCheckEntries(ents, lo))

		i := 1 + rng.Uint64N(n)
		term, err := l.Term(i)
		require.NoError(t, err)
		require.Equal(t, uint64(1), term)
		base, next, err := l.EntryOffsets(i)
		require.NoError(t, err)
		require.Equal(t, [2]int64{int64(i) - 1, int64(i)}, [2]int64{base, next})
		hwm, err := l.NextOffsetAt(i)
		require.NoError(t, err)
		require.Equal(t, int64(i), hwm)
		off, err := l.OffsetForTime(int64(i))
		require.NoError(t, err)
		require.Equal(t, int64(i)-1, off)
	}
	check("Entries, Term, offsets")

	require.NoError(t, l.Close())
	open, _ := cfs.handles()
	require.Zero(t, open, "Close closes every file")

	// Recovery leaves the closed segments' files closed: readers open them.
	l = openMem(t, opts)
	check("recovery")
	open, _ = cfs.handles()
	require.Equal(t, 1, open, "only the active segment's file is open after Open")
	fcReadAll(t, l, 2<<10)
	check("reading after recovery")
	require.NoError(t, l.Close())
	open, _ = cfs.handles()
	require.Zero(t, open)
}

// One cache serves all the logs of a server: the bound is for them all.
func TestFileCacheSharedByLogs(t *testing.T) {
	const limit = 4
	cfs := &countFS{FS: vfs.NewMem()}
	files := NewFileCache(limit)
	la := openMem(t, fcOpts(cfs, "/data/a", 1, files))
	lb := openMem(t, fcOpts(cfs, "/data/b", 2, files))
	fcWrite(t, la, 1, 400)
	fcWrite(t, lb, 1, 400)
	const bound = 3*limit + 2 // and the two active segments
	_, peak := cfs.handles()
	require.LessOrEqual(t, peak, bound)

	// Interleaved catch-up reads of both logs.
	offA, offB, end := int64(0), int64(0), la.EndOffset()
	for offA < end || offB < end {
		for _, r := range []struct {
			l   *Log
			off *int64
		}{{la, &offA}, {lb, &offB}} {
			if *r.off == end {
				continue
			}
			bs, err := r.l.Read(*r.off, end, 2<<10)
			require.NoError(t, err)
			require.NoError(t, fcCheckBatches(bs, *r.off))
			*r.off = bs[len(bs)-1].NextOffset
		}
	}
	open, peak := cfs.handles()
	require.LessOrEqual(t, peak, bound, "two logs, one cache")
	require.LessOrEqual(t, open, bound)
	require.NoError(t, la.Close())
	require.NoError(t, lb.Close())
	open, _ = cfs.handles()
	require.Zero(t, open)
}

// openClosed returns which of l's closed segments have their files open.
func openClosed(l *Log) []int {
	l.files.mu.Lock()
	defer l.files.mu.Unlock()
	var out []int
	for k, s := range l.segs[:len(l.segs)-1] {
		if s.f != nil {
			out = append(out, k)
		}
	}
	return out
}

// The cache closes the least recently used segment's files, never those a
// reader holds: then it goes over its limit, and back under as they are
// released. A segment deleted while read closes its files when released.
func TestFileCacheEvictsLeastRecentlyUsedUnpinned(t *testing.T) {
	cfs := &countFS{FS: vfs.NewMem()}
	opts := fcOpts(cfs, "/data/s1", 7, NewFileCache(2))
	l := openMem(t, opts)
	fcWrite(t, l, 1, 100)
	require.NoError(t, l.Close())
	l = openMem(t, opts)
	require.Empty(t, openClosed(l))

	read := func(k int) { // an entry of closed segment k
		_, err := l.Entries(l.segs[k].hdr.first, l.segs[k].hdr.first+1, math.MaxUint64)
		require.NoError(t, err)
	}
	read(0)
	read(1)
	read(0)
	read(2) // 1 is the least recently used
	require.Equal(t, []int{0, 2}, openClosed(l))

	// Readers hold 0, 1 and 3: all stay open, over the limit.
	for _, k := range []int{0, 1, 3} {
		require.NoError(t, l.segs[k].acquire())
	}
	require.Equal(t, []int{0, 1, 3}, openClosed(l))
	l.segs[0].release() // 0 is the least recently used unpinned one
	require.Equal(t, []int{1, 3}, openClosed(l))

	// Retention deletes segments 0-2 while 1 is held: its files stay open
	// (its reads go on) until it is released.
	held, kept := l.segs[1], l.segs[3]
	n, err := l.DeleteBefore(kept.hdr.firstOffset)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	open, _ := cfs.handles()
	require.Equal(t, 3+3+1, open, "the deleted segment's files stay open while held")
	held.release()
	open, _ = cfs.handles()
	require.Equal(t, 3+1, open, "and are closed when it is released")
	kept.release()
	open, _ = cfs.handles()
	require.Equal(t, 3+1, open, "a released segment stays cached within the limit")
	require.NoError(t, l.Close())
	open, _ = cfs.handles()
	require.Zero(t, open)
}

// Readers of old segments, a writer rolling new ones and retention
// deleting the oldest, at once, on a small cache: every read returns what
// was written or says the data went (ErrOutOfRange, ErrCompacted), and
// no file is left open after Close. Run with -race.
func TestFileCacheConcurrentReadersAndRetention(t *testing.T) {
	const limit, readers = 3, 3
	cfs := &countFS{FS: vfs.NewMem()}
	l := openMem(t, fcOpts(cfs, "/data/s1", 7, NewFileCache(limit)))
	fcWrite(t, l, 1, 200)

	var stop sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, readers)
	for r := range readers {
		stop.Go(func() {
			errs <- fcReader(l, uint64(r), done)
		})
	}
	for i := uint64(201); i <= 3000; i += 100 {
		fcWrite(t, l, i, i+99)
		_, err := l.DeleteBefore(int64(i) - 300) // keeps about 25 segments
		require.NoError(t, err)
	}
	close(done)
	stop.Wait()
	require.Greater(t, l.StartOffset(), int64(2500), "retention deleted the head")
	for range readers {
		require.NoError(t, <-errs)
	}
	open, peak := cfs.handles()
	require.LessOrEqual(t, open, 3*limit+1, "back within the limit once the readers are done")
	// Readers pin the segments they read (a Read of 2 KiB up to 3); the
	// cache exceeds its limit only by those.
	require.LessOrEqual(t, peak, 3*(limit+readers*3+1)+2)
	fcReadAll(t, l, 2<<10)
	require.NoError(t, l.Close())
	open, _ = cfs.handles()
	require.Zero(t, open, "no descriptor leaked")
}

// fcReader reads fcWrite's log in every way until done: Read from random
// offsets, Entries, Term, OffsetForTime. Only what retention explains may
// fail.
func fcReader(l *Log, seed uint64, done chan struct{}) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	gone := func(err error) bool {
		return errors.Is(err, ErrOutOfRange) || errors.Is(err, raft.ErrCompacted)
	}
	for reads := 0; ; {
		select {
		case <-done:
			if reads < 10 {
				return fmt.Errorf("reader %d only read %d times", seed, reads)
			}
			return nil
		default:
		}
		start, end := l.StartOffset(), l.EndOffset()
		off := start + rng.Int64N(end-start)
		bs, err := l.Read(off, end, 2<<10)
		switch {
		case gone(err):
		case err != nil:
			return fmt.Errorf("Read at %d: %w", off, err)
		default:
			if err := fcCheckBatches(bs, off); err != nil {
				return err
			}
			reads++
		}
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		lo := first + rng.Uint64N(last+1-first)
		hi := min(lo+20, last+1)
		ents, err := l.Entries(lo, hi, 4<<10)
		switch {
		case gone(err):
		case err != nil:
			return fmt.Errorf("Entries [%d, %d): %w", lo, hi, err)
		default:
			if err := fcCheckEntries(ents, lo); err != nil {
				return err
			}
		}
		if term, err := l.Term(lo); err != nil && !gone(err) {
			return fmt.Errorf("Term(%d): %w", lo, err)
		} else if err == nil && term != 1 {
			return fmt.Errorf("Term(%d) = %d", lo, term)
		}
		// Entry lo (offset lo-1) is the first with a timestamp of lo, or
		// else retention deleted it meanwhile.
		if off, err := l.OffsetForTime(int64(lo)); err != nil {
			return fmt.Errorf("OffsetForTime(%d): %w", lo, err)
		} else if want := int64(lo) - 1; off != want && (off < want || off > l.StartOffset()) {
			return fmt.Errorf("OffsetForTime(%d) = %d", lo, off)
		}
	}
}

// Idle logs park their active segments in the shared cache: descriptors
// are bounded by the cache whatever the number of logs, reads of a parked
// segment reopen its data file through the cache, and the next write takes
// it back, its records after the parked ones, also across a crash. (Every
// log's active segment used to stay open: a server with 10,000 streams
// needed 10,000 descriptors, and a test process of three hit its ulimit.)
func TestIdleLogsParkTheirActiveSegments(t *testing.T) {
	const logs, limit = 40, 4
	mem := vfs.NewMem()
	cfs := &countFS{FS: mem}
	files := NewFileCache(limit)
	var ls []*Log
	for k := range logs {
		l := openMem(t, fcOpts(cfs, fmt.Sprintf("/data/%d", k), uint64(k+1), files))
		fcWrite(t, l, 1, 5) // within the first segment
		ls = append(ls, l)
	}
	open, _ := cfs.handles()
	require.GreaterOrEqual(t, open, logs, "one active segment each")

	for _, l := range ls {
		require.False(t, l.Park(), "written since the last call: not idle yet")
	}
	for _, l := range ls {
		require.True(t, l.Park())
	}
	open, _ = cfs.handles()
	require.LessOrEqual(t, open, limit, "idle logs hold the cache's descriptors only")

	// Reads of parked segments, through the cache.
	for _, l := range ls {
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.NoError(t, fcCheckBatches(bs, 0))
		ents, err := l.Entries(1, 6, math.MaxUint64)
		require.NoError(t, err)
		require.NoError(t, fcCheckEntries(ents, 1))
	}
	_, peak := cfs.handles()
	require.LessOrEqual(t, peak, limit+1)

	// A write takes the segment back; a Park right after does not park it.
	for _, l := range ls {
		fcWrite(t, l, 6, 8)
		require.False(t, l.Park())
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.Len(t, bs, 8)
		require.NoError(t, fcCheckBatches(bs, 0))
	}
	// Written, not synced: never parked.
	require.NoError(t, ls[0].Write([]*pb.Entry{userEnt(9, 1, 1, 200, 9)}, hardState(1, 1, 9)))
	require.False(t, ls[0].Park())
	require.False(t, ls[0].Park(), "unsynced writes keep the file")
	_, err := ls[0].Sync()
	require.NoError(t, err)
	require.True(t, ls[0].Park())

	mem.CrashClean()
	for k := range logs {
		l := openMem(t, fcOpts(mem, fmt.Sprintf("/data/%d", k), uint64(k+1), NewFileCache(limit)))
		want := 8
		if k == 0 {
			want = 9
		}
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.Len(t, bs, want, "log %d", k)
		require.NoError(t, fcCheckBatches(bs, 0))
		require.NoError(t, l.Close())
	}
}

// When many parked logs write at once (a restarted peer's groups all
// electing, each writing its vote), each goes back to the cache as its
// write is synced while the cache is over its limit: descriptors stay near
// the limit instead of one per log until the next parking rounds (a
// 10,000-stream restart ran a process of three servers out of
// descriptors that way).
func TestParkedLogsWritingAtOnceStayWithinTheCache(t *testing.T) {
	const logs, limit = 40, 4
	mem := vfs.NewMem()
	cfs := &countFS{FS: mem}
	files := NewFileCache(limit)
	var ls []*Log
	for k := range logs {
		l := openMem(t, fcOpts(cfs, fmt.Sprintf("/data/%d", k), uint64(k+1), files))
		fcWrite(t, l, 1, 5)
		require.False(t, l.Park())
		require.True(t, l.Park())
		ls = append(ls, l)
	}
	for round := range 3 { // votes, then entries of the new term
		for _, l := range ls {
			require.NoError(t, l.Write(nil, hardState(uint64(2+round), 1, 5)))
			_, err := l.Sync()
			require.NoError(t, err)
		}
	}
	open, peak := cfs.handles()
	require.LessOrEqual(t, open, limit, "back in the cache after each sync")
	require.LessOrEqual(t, peak, limit+2, "never one per log")
	for k, l := range ls {
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.Len(t, bs, 5, "log %d", k)
	}
}
