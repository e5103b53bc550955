package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/pingcap/failpoint"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/vfs"
)

// Open opens (recovering) or creates the log in opts.Dir.
func Open(opts Options) (*Log, error) {
	if opts.FS == nil || opts.Dir == "" {
		return nil, errors.New("storage: Options.FS and Options.Dir are required")
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = defaultSegmentSize
	}
	if opts.SegmentSize < segHeaderSize+4*recSize(stateSize) {
		return nil, fmt.Errorf("storage: SegmentSize %d too small", opts.SegmentSize)
	}
	switch {
	case opts.TailBudget != nil && opts.TailCacheBytes <= 0:
		opts.TailCacheBytes = opts.TailBudget.Limit()
	case opts.TailBudget != nil:
		opts.TailCacheBytes = min(opts.TailCacheBytes, opts.TailBudget.Limit())
	case opts.TailCacheBytes <= 0:
		opts.TailCacheBytes = defaultTailCacheBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = defaultMaxReadBytes
	}
	if opts.Files == nil {
		opts.Files = NewFileCache(defaultFileCacheSegments)
	}
	l := &Log{fs: opts.FS, dir: opts.Dir, stream: opts.Stream, segSize: opts.SegmentSize, logger: opts.Logger,
		keepPageCache: opts.KeepPageCache, maxRead: opts.MaxReadBytes, space: opts.Space, files: opts.Files}
	l.cache.limit = opts.TailCacheBytes
	l.cache.budget = opts.TailBudget
	l.readAhead = opts.ReadAhead
	l.readBudget = opts.ReadBudget
	l.deferRecoverySync = opts.DeferRecoverySync
	if err := l.recover(); err != nil {
		for _, s := range l.segs {
			s.retire()
		}
		l.cache.reset() // give back what recovery cached, if anything
		return nil, err
	}
	if opts.TailBudget != nil {
		opts.TailBudget.register(l)
	}
	l.assertRecovered()
	return l, nil
}

func (l *Log) corrupt(file string, pos int64, format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d: %s", ErrCorrupt, file, pos, fmt.Sprintf(format, args...))
}

func (l *Log) recover() error {
	failpoint.Inject("beforeRecovery", func(val failpoint.Value) {
		failpoints.Hit("storage/beforeRecovery")
		if failpoints.Bool(val) || failpoints.EIO(val) {
			failpoint.Return(fmt.Errorf("storage: recovering %s: %w", l.dir, failpoints.IOError()))
		}
	})
	fsys, dir := l.fs, l.dir
	if err := fsys.MkdirAll(dir); err != nil {
		return err
	}
	m, ok, err := loadMeta(fsys, dir)
	if err != nil {
		return err
	}
	if !ok {
		m = meta{stream: l.stream}
		if err := saveMeta(fsys, dir, &m); err != nil {
			return err
		}
		// A new directory (and any parent MkdirAll made) is durable only
		// once its parent is synced.
		for d := dir; ; {
			if err := fsys.SyncDir(d); err != nil {
				return err
			}
			parent := path.Dir(d)
			if parent == d || parent == "." {
				break
			}
			d = parent
		}
	} else if m.stream != l.stream {
		return fmt.Errorf("storage: %s belongs to stream %d, not %d", dir, m.stream, l.stream)
	}
	l.meta, l.confs = m, m.confs
	if l.prod, err = l.loadProducers(); err != nil {
		return err
	}
	if canary.On(canary.ConfStateNotReplayed) && len(l.confs) > 1 {
		l.confs = l.confs[:1] // broken on purpose: membership changes since the log start are forgotten
	}

	names, err := fsys.List(dir)
	if err != nil {
		return err
	}
	var firsts []uint64
	segFiles := map[string]bool{}
	for _, n := range names {
		if first, ok := parseSegName(n); ok {
			firsts = append(firsts, first)
			segFiles[strings.TrimSuffix(n, ".seg")] = true
		}
	}
	for _, n := range names { // leftovers: temp meta, index files without a segment
		base, ext := strings.TrimSuffix(n, path.Ext(n)), path.Ext(n)
		if n == metaTmpName || n == producersTmpName || ((ext == ".ridx" || ext == ".lidx") && !segFiles[base]) {
			_ = fsys.Remove(path.Join(dir, n))
		}
	}
	// An interrupted DeleteBefore may have left segments wholly before the
	// retention point, which the meta file records before any is removed.
	for len(firsts) > 1 && m.retFirst > 0 && firsts[1] <= m.retFirst {
		dropSegFiles(fsys, segBase(dir, firsts[0]))
		firsts = firsts[1:]
	}

	// A retention point always falls on a segment's start, except after an
	// InstallSnapshot that a crash interrupted: then every segment left is
	// from before the snapshot and the log restarts empty at the point.
	if m.retFirst > 0 && !slices.Contains(firsts, m.retFirst) {
		for _, f := range firsts {
			dropSegFiles(fsys, segBase(dir, f))
		}
		firsts = nil
	}

	segs, err := l.openSegments(firsts)
	if err != nil {
		l.segs = segs
		return err
	}
	l.segs = segs
	if len(segs) == 0 {
		return l.createFirst()
	}
	// Files a previous instance created may not be durable in the
	// directory yet (it may have closed without a Sync): the first Sync
	// syncs the directory too.
	l.dirDirty = true
	if m.retFirst > 0 && segs[0].hdr.first != m.retFirst {
		return l.corrupt(segs[0].base+".seg", 0, "log starts at %d, retention point is %d", segs[0].hdr.first, m.retFirst)
	}
	for k := 0; k < len(segs)-1; k++ {
		if err := l.recoverClosed(segs[k], segs[k+1]); err != nil {
			return err
		}
		segs[k].cached = true // its files are opened when read
	}
	return l.recoverActive()
}

func dropSegFiles(fsys vfs.FS, base string) {
	_ = fsys.Remove(base + ".seg")
	_ = fsys.Remove(base + ".ridx")
	_ = fsys.Remove(base + ".lidx")
}

// openSegments checks the segment files' headers. A last segment with an
// invalid header is an unfinished roll (created, never synced) and is
// removed, unless a valid record follows the header. Only the last
// segment's file is left open: the others are closed segments, whose files
// are opened when needed (a log may have more segments than descriptors).
func (l *Log) openSegments(firsts []uint64) ([]*segment, error) {
	var segs []*segment
	for i, first := range firsts {
		s := &segment{base: segBase(l.dir, first), files: l.files, fs: l.fs}
		f, err := l.fs.Open(s.base + ".seg")
		if err != nil {
			return segs, err
		}
		size, err := f.Size()
		if err != nil {
			_ = f.Close()
			return segs, err
		}
		s.cap, s.allocated = size, size // the active one's cap is set by recoverActive
		var hb [segHeaderSize]byte
		n, _ := f.ReadAt(hb[:], 0)
		hdr, ok := decodeSegHeader(hb[:n])
		if ok && (hdr.stream != l.stream || hdr.first != first) {
			_ = f.Close()
			return segs, l.corrupt(s.base+".seg", 0, "header names stream %d index %d", hdr.stream, hdr.first)
		}
		if !ok {
			if i < len(firsts)-1 {
				_ = f.Close()
				return segs, l.corrupt(s.base+".seg", 0, "bad segment header")
			}
			if p := findValidRecord(f, size, segHeaderSize, l.stream, 0, nil); p >= 0 {
				_ = f.Close()
				return segs, l.corrupt(s.base+".seg", 0, "bad segment header before a valid record at %d", p)
			}
			l.logger.Warn("storage: removing unfinished segment", "file", s.base+".seg")
			_ = f.Close()
			dropSegFiles(l.fs, s.base)
			l.dirDirty = true
			continue
		}
		s.hdr = hdr
		if i == len(firsts)-1 {
			s.f = f
		} else {
			_ = f.Close()
		}
		segs = append(segs, s)
	}
	if n := len(segs); n > 0 && segs[n-1].f == nil { // the last file was an unfinished roll
		s := segs[n-1]
		f, err := l.fs.Open(s.base + ".seg")
		if err != nil {
			return segs, err
		}
		s.f = f
	}
	return segs, nil
}

// recoverClosed checks a closed segment against the header of the one
// after it, which vouches for where it ends; index files are used when
// they agree, else rebuilt from a scan.
func (l *Log) recoverClosed(s, next *segment) error {
	vouched := func() bool {
		return s.last+1 == next.hdr.first && s.lastCRC == next.hdr.chainCRC &&
			s.lastTerm == next.hdr.prevTerm && s.endOffset == next.hdr.firstOffset
	}
	if s.loadIndexFiles(l.fs, l.stream) && vouched() {
		return nil
	}
	s.dropIndexFiles(l.fs)
	f, err := l.fs.Open(s.base + ".seg")
	if err != nil {
		return err
	}
	defer f.Close()
	sc, err := scanSegment(f, s, l.stream, s.allocated, nil)
	if err != nil {
		return err
	}
	s.applyScan(sc)
	if !vouched() {
		return l.corrupt(s.base+".seg", sc.stop, "records end at index %d, next segment starts at %d", sc.last, next.hdr.first)
	}
	l.logger.Info("storage: rebuilding index files", "segment", s.base+".seg")
	if err := s.writeIndexFiles(l.fs, l.stream, sc.ridx, sc.lidx); err != nil {
		return err
	}
	s.closeIndexFiles() // opened again when read
	return nil
}

func (s *segment) applyScan(sc *scanResult) {
	s.last, s.lastTerm, s.lastCRC, s.end = sc.last, sc.lastTerm, sc.lastCRC, sc.end
	s.endOffset, s.maxTs, s.startMaxTs = sc.endOffset, sc.maxTs, sc.startMaxTs
}

// recoverActive scans the last segment: the log ends at its first invalid
// record, unless a valid record follows (then it is corruption).
func (l *Log) recoverActive() error {
	s := l.active()
	s.dropIndexFiles(l.fs) // any are stale: the segment is active again
	ext := dataExtents(s.f, s.allocated)
	sc, err := scanSegment(s.f, s, l.stream, s.allocated, ext)
	if err != nil {
		return err
	}
	if p := findValidRecord(s.f, s.allocated, sc.stop+recAlign, l.stream, sc.last+1, ext); p >= 0 {
		return l.corrupt(s.base+".seg", sc.stop, "invalid record followed by a valid one at %d", p)
	}
	s.applyScan(sc)
	l.ridx, l.lidx = sc.ridx, sc.lidx
	st, haveState := sc.st, sc.haveState
	for k := len(l.segs) - 2; !haveState && k >= 0; k-- {
		p := l.segs[k]
		if err := p.acquire(); err != nil {
			return err
		}
		psc, err := scanSegment(p.f, p, l.stream, p.allocated, nil)
		p.release()
		if err != nil {
			return err
		}
		st, haveState = psc.st, psc.haveState
	}
	if !haveState {
		st = state{maxTs: s.maxTs}
	}
	// A truncation saves the hard state in the meta file before it
	// destroys the records that held it: join the two (a later term wins;
	// within a term the vote is set once and commit only grows).
	if j := joinState(st, l.meta.st); j != st {
		st, haveState, sc.haveState = j, false, false // write the join into the log
	}
	applied := st.applied
	if n := len(l.confs); n > 0 && l.confs[n-1].index > applied && l.confs[n-1].index <= s.last {
		applied = l.confs[n-1].index
	}
	if applied <= s.last && applied > st.commit {
		// A conf change was applied, so it was committed: raft requires
		// applied <= commit at restart, and the hard state that said so
		// may not have been synced before the crash (the change's record
		// is durable on its own: simulator seed 1212). Raised in st, which
		// a segment without a state record is given below (seed 2204: the
		// raise was lost there, and the restart panicked).
		st.commit = applied
	}
	l.st = st
	l.pendingApplied.Store(st.applied)
	l.durableApplied.Store(applied)
	// The file need not be a whole segment (its allocation grows with its
	// records): it is grown as writes need it, like the new segment it was.
	s.cap = max(s.cap, l.segSize)
	if err := l.giveBackAllocation(s); err != nil {
		return err
	}
	if !sc.haveState {
		// Every segment must hold a state record, so deleting the ones
		// before it never loses the hard state.
		if err := l.appendRecords(nil, nil, &st); err != nil {
			return err
		}
	}
	// A process that crashed may have left writes it never synced in the
	// page cache, and files whose directory entry is not durable. Raft
	// takes whatever the log holds as stable (it may vote and acknowledge
	// on it), so make it stable before anyone reads it (or the caller
	// does, for the whole file system: DeferRecoverySync).
	if l.deferRecoverySync {
		l.dirDirty = false // the file system's sync covers the directory too
		return nil
	}
	l.dirDirty = true
	_, err = l.Sync()
	return err
}

// giveBackAllocation shrinks the active segment's file to the step its
// records need, so that a stream idle since a restart (or since an upgrade
// from whole preallocated segments) holds little disk. It runs after the
// search for valid records beyond the end, which saw the whole file; the
// Sync ending recovery makes the new size durable.
func (l *Log) giveBackAllocation(s *segment) error {
	fit := l.fitAllocation(s.end, s.cap)
	if fit >= s.allocated {
		return nil
	}
	if err := s.f.Truncate(fit); err != nil {
		return err
	}
	s.allocated = fit
	return nil
}

func joinState(a, b state) state {
	if b.term > a.term {
		a.term, a.vote = b.term, b.vote
	} else if b.term == a.term && a.vote == 0 {
		a.vote = b.vote
	}
	a.commit, a.applied = max(a.commit, b.commit), max(a.applied, b.applied)
	return a
}

// createFirst starts an empty log (or one whose every segment was an
// unfinished roll) at the retention point.
func (l *Log) createFirst() error {
	first := max(l.meta.retFirst, 1)
	prev := &segment{last: first - 1, lastTerm: l.meta.retPrevTerm, endOffset: l.meta.retStart, maxTs: -1}
	l.st = l.meta.st // zero for a new log; the saved hard state after a snapshot
	l.st.maxTs = -1
	l.pendingApplied.Store(l.st.applied)
	l.durableApplied.Store(l.st.applied)
	s, err := l.createSegment(prev, 0)
	if err != nil {
		return err
	}
	l.segs = []*segment{s}
	if err := s.f.Sync(); err != nil {
		return err
	}
	l.dirDirty = false
	return l.fs.SyncDir(l.dir)
}

// scanResult is what walking a segment's record chain found.
type scanResult struct {
	ridx       []ridxEnt
	lidx       []lidxEnt
	last       uint64
	lastTerm   uint64
	lastCRC    uint32
	end        int64 // after the last valid record
	stop       int64 // where the walk stopped (== end)
	endOffset  int64
	maxTs      int64
	startMaxTs int64
	st         state // the last state record
	haveState  bool
}

// winReader serves small reads of a file from a window buffer; every read
// is bounded by the file size, so garbage lengths cannot blow it up.
type winReader struct {
	f     vfs.File
	size  int64
	limit int64 // windows end here when the bytes asked for do (the data's end; 0: size)
	buf   []byte
	off   int64
	n     int
}

const window = 1 << 20

// windows pools window buffers: a restart scans every stream's active
// segment twice (scanSegment, findValidRecord), and a buffer each made 2.5
// GB of garbage at 10,000 streams, an eighth of the opening's CPU in GC.
var windows = sync.Pool{New: func() any { return new([window]byte) }}

func (w *winReader) get(off int64, n int) ([]byte, error) {
	if off >= w.off && off+int64(n) <= w.off+int64(w.n) {
		return w.buf[off-w.off : off-w.off+int64(n)], nil
	}
	want := min(int64(max(n, window)), w.size-off)
	if w.limit > 0 { // past the data, only what is asked for
		want = min(want, max(int64(n), w.limit-off))
	}
	if int(want) < n {
		return nil, io.ErrUnexpectedEOF
	}
	if int64(cap(w.buf)) < want {
		w.release()
		if want <= window {
			w.buf = windows.Get().(*[window]byte)[:]
		} else {
			w.buf = make([]byte, want)
		}
	}
	m, err := w.f.ReadAt(w.buf[:want], off)
	w.off, w.n = off, m
	if m < n {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %s at %d: %w", w.f.Name(), off, err)
	}
	return w.buf[off-w.off : off-w.off+int64(n)], nil
}

// release gives a pooled window back; w must not be used after.
func (w *winReader) release() {
	if cap(w.buf) == window {
		windows.Put((*[window]byte)(w.buf[:window]))
	}
	w.buf, w.n = nil, 0
}

// extents is where a file's data lies, the rest reading as zeros (nil:
// all of it is data). It is taken before the file is read: the kernel
// counts the blocks a read brought in (read ahead included) as data, zeros
// or not.
type extents [][2]int64

// maxExtents bounds the regions taken; the rest of the file counts as data.
const maxExtents = 64

// dataExtents is where f's data lies within size (vfs.DataMap).
func dataExtents(f vfs.File, size int64) extents {
	m, ok := f.(vfs.DataMap)
	if !ok {
		return nil
	}
	ext := extents{}
	for off := int64(0); off < size; {
		start, end, ok, err := m.DataAfter(off)
		switch {
		case err != nil:
			return nil
		case !ok || start >= size:
			return ext
		case len(ext) == maxExtents || end <= start:
			return append(ext, [2]int64{start, size})
		}
		ext = append(ext, [2]int64{start, min(end, size)})
		off = end
	}
	return ext
}

// after is the first data region at or after off, within size: (size,
// size) when none.
func (e extents) after(off, size int64) (start, end int64) {
	if e == nil {
		return off, size
	}
	for _, r := range e {
		if r[1] > off {
			return max(r[0], off), r[1]
		}
	}
	return size, size
}

// scanSegment walks the record chain of s (its data file f) from its
// header. Only IO errors are returned; an invalid record just ends the walk.
func scanSegment(f vfs.File, s *segment, stream uint64, size int64, ext extents) (*scanResult, error) {
	sc := &scanResult{
		last: s.hdr.first - 1, lastTerm: s.hdr.prevTerm, lastCRC: s.hdr.chainCRC,
		end: segHeaderSize, endOffset: s.hdr.firstOffset, maxTs: -1, startMaxTs: -1,
	}
	_, dataEnd := ext.after(segHeaderSize, size)
	w := &winReader{f: f, size: size, limit: dataEnd}
	defer w.release()
	first := true
	for pos := int64(segHeaderSize); pos+recHeaderSize <= size; {
		hb, err := w.get(pos, recHeaderSize)
		if err != nil {
			return nil, err
		}
		if !headerPlausible(hb, size-pos) {
			break
		}
		h := decodeRecHeader(hb)
		rec, err := w.get(pos, recHeaderSize+int(h.length))
		if err != nil {
			return nil, err
		}
		payload := rec[recHeaderSize:]
		if recordCRC(stream, rec, payload) != h.crc || h.prevCRC != sc.lastCRC || h.base != sc.endOffset {
			break
		}
		if h.typ == recState {
			if h.index != sc.last || h.term != sc.lastTerm || h.count != 0 {
				break
			}
			sc.st, sc.haveState = decodeState(payload), true
			if first {
				sc.startMaxTs, sc.maxTs = sc.st.maxTs, sc.st.maxTs
			}
		} else {
			if h.index != sc.last+1 || h.term < sc.lastTerm {
				break
			}
			next := h.base + int64(h.count)
			if h.typ == recUser {
				info, err := parseBatches(payload)
				if err != nil || info.offsets != uint64(h.count) {
					break
				}
				sc.maxTs = max(sc.maxTs, info.maxTs)
				sc.lidx = append(sc.lidx, lidxEnt{base: h.base, next: next, pos: pos + recHeaderSize,
					index: h.index, maxTs: sc.maxTs, length: h.length})
			} else if h.count != 0 {
				break
			}
			sc.ridx = append(sc.ridx, ridxEnt{pos: pos, term: h.term, base: h.base, count: h.count, length: h.length})
			sc.last, sc.lastTerm, sc.endOffset = h.index, h.term, next
		}
		first = false
		sc.lastCRC = h.crc
		pos += recSize(int(h.length))
		sc.end = pos
	}
	sc.stop = sc.end
	return sc, nil
}

// findValidRecord looks, from position from on (8-aligned), for a record
// that is valid on its own (plausible header, crc with this stream) with
// index >= minIndex. It returns its position or -1. Used to tell a torn
// tail (nothing valid after it) from damage in the middle. What the file
// says holds no data reads as zeros, where no record starts: it is
// skipped, not read (an idle stream's allocation is mostly never written).
func findValidRecord(f vfs.File, size, from int64, stream, minIndex uint64, ext extents) int64 {
	w := &winReader{f: f, size: size}
	defer w.release()
	for pos := (from + recAlign - 1) &^ (recAlign - 1); pos+recHeaderSize <= size; pos += recAlign {
		if pos >= w.limit {
			start, end := ext.after(pos, size)
			pos, w.limit = max(pos, (start+recAlign-1)&^(recAlign-1)), end
			if pos+recHeaderSize > size {
				break
			}
		}
		if i := pos - w.off + 8; pos >= w.off && i < int64(w.n) && w.buf[i] == 0 {
			continue // no record starts here (hb[8] below), read already: a preallocated tail's zeros, fast
		}
		hb, err := w.get(pos, recHeaderSize)
		if err != nil {
			return -1
		}
		if hb[8] == 0 || !headerPlausible(hb, size-pos) {
			continue
		}
		h := decodeRecHeader(hb)
		if h.index < minIndex {
			continue
		}
		rec, err := w.get(pos, recHeaderSize+int(h.length))
		if err != nil {
			return -1
		}
		if recordCRC(stream, rec, rec[recHeaderSize:]) == h.crc {
			return pos
		}
	}
	return -1
}
