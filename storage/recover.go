package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"

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
	l := &Log{fs: opts.FS, dir: opts.Dir, stream: opts.Stream, segSize: opts.SegmentSize, logger: opts.Logger, name: opts.Name,
		keepPageCache: opts.KeepPageCache, maxRead: opts.MaxReadBytes, space: opts.Space, files: opts.Files}
	l.cache.limit = opts.TailCacheBytes
	l.cache.budget, l.cache.owner = opts.TailBudget, l
	l.readAhead = opts.ReadAhead
	l.readBudget = opts.ReadBudget
	if err := l.recover(); err != nil {
		for _, s := range l.segs {
			s.retire()
		}
		l.cache.reset() // give back what recovery cached, if anything
		return nil, err
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
			l.log().Warn("storage: removing unfinished segment", "file", s.base+".seg")
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
	l.log().Info("storage: rebuilding index files", "segment", s.base+".seg")
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
	// on it), so make it stable before anyone reads it.
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
