package storage

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pingcap/failpoint"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/vfs"
)

// segment is one segment file. Fields other than the header describe the
// segment's end; for the active segment they are kept current by the writer
// (under Log.mu for the parts readers use).
type segment struct {
	base string // dir/<first %020d>, without extension
	f    vfs.File
	hdr  segHeader
	// cap is the segment's size: records lie below it, and the writer
	// rolls when the next one would not fit. allocated is how much of it
	// the file holds (its size), grown ahead of the writer as records
	// arrive, so that an idle stream does not hold a whole segment of disk.
	cap       int64
	allocated int64 // writer and recovery only; readers go by cap

	last       uint64 // last entry index (hdr.first-1 if none)
	lastTerm   uint64
	lastCRC    uint32 // crc of the last record (entry or state)
	end        int64  // position after the last record
	endOffset  int64
	maxTs      int64 // running max timestamp after the last user record
	startMaxTs int64 // running max at the segment start (its first state record)

	// closed segments only: the index files, for preads
	ridxF, lidxF vfs.File
	nUser        int64
	// hinted: catch-up readahead was asked for up to here (readAhead)
	hinted atomic.Int64

	// File handles. The active segment's data file is open from its
	// creation until it is retired. A closed segment is cached: its three
	// files are opened when a reader acquires it and closed by the
	// FileCache once it is the least recently used and no reader holds it.
	// Readers use a segment's files holding a reference, some without the
	// log's lock (catch-up preads); a segment retired meanwhile (deleted,
	// truncated away, the log closed) closes its files when the last one
	// lets go. The fields below, and f, ridxF and lidxF of a cached
	// segment, are guarded by files.mu.
	files  *FileCache
	fs     vfs.FS
	openMu sync.Mutex // serializes opening a cached segment's files

	refs    int
	retired bool
	cached  bool
	// parked: the active segment of an idle log, handed to the cache
	// (Log.Park) with its data file only (it has no index files); the
	// writer takes it back before writing (Log.unpark).
	parked bool
	// the FileCache's LRU list: in it while a cached segment's files are open
	inLRU        bool
	newer, older *segment
}

func segBase(dir string, first uint64) string {
	return path.Join(dir, fmt.Sprintf("%020d", first))
}

// parseSegName returns the first index a segment file name encodes.
func parseSegName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// acquire pins the segment's files open for a reader until release. A
// cached segment's files are opened if the cache closed them: a file gone
// from the directory then is ErrCorrupt (files of a segment still in the
// log are only deleted after it left the log, under the log's lock).
func (s *segment) acquire() error {
	c := s.files
	c.mu.Lock()
	if s.retired { // never while the caller holds the log's lock
		c.mu.Unlock()
		return ErrClosed
	}
	s.refs++
	if !s.cached || s.f != nil {
		if s.inLRU {
			c.touchLocked(s)
		}
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if err := s.openCached(); err != nil {
		s.release()
		return err
	}
	return nil
}

// openCached opens a cached segment's files (s is pinned by the caller).
func (s *segment) openCached() error {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	c := s.files
	c.mu.Lock()
	open := s.f != nil // another reader opened them meanwhile
	parked := s.parked
	c.mu.Unlock()
	if open {
		return nil
	}
	c.reserve() // close others first: the bound holds at every instant
	var fs [3]vfs.File
	exts := []string{".seg", ".ridx", ".lidx"}
	if parked {
		exts = exts[:1] // the active segment's index is in memory
	}
	for k, ext := range exts {
		f, err := s.fs.Open(s.base + ext)
		if err != nil {
			closeAll(fs[:k])
			c.unreserve()
			if errors.Is(err, iofs.ErrNotExist) {
				return fmt.Errorf("%w: %s of a segment in the log is missing: %v", ErrCorrupt, s.base+ext, err)
			}
			return err
		}
		fs[k] = f
	}
	c.mu.Lock()
	s.f, s.ridxF, s.lidxF = fs[0], fs[1], fs[2]
	c.pushLocked(s)
	c.mu.Unlock()
	return nil
}

// pinIfOpen pins the segment and returns its data file if that is open,
// without opening anything: for hints not worth a reopen. Nil: not pinned.
func (s *segment) pinIfOpen() vfs.File {
	c := s.files
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.retired || s.f == nil {
		return nil
	}
	s.refs++
	return s.f
}

func (s *segment) release() {
	c := s.files
	c.mu.Lock()
	s.refs--
	var victims []vfs.File
	if s.refs == 0 && s.retired {
		victims = s.takeFilesLocked()
	} else if c.n > c.limit { // the cache went over while all was in use
		victims = c.evictLocked()
	}
	c.mu.Unlock()
	closeAll(victims)
}

// retire closes the segment's files now, or when its last reader lets go.
func (s *segment) retire() {
	c := s.files
	c.mu.Lock()
	s.retired = true
	var fs []vfs.File
	if s.refs == 0 {
		fs = s.takeFilesLocked()
	}
	c.mu.Unlock()
	closeAll(fs)
}

// reclaim takes a cached segment's files back from the cache, open: it is
// the active segment again (a truncation cut into it).
func (s *segment) reclaim() error {
	if err := s.acquire(); err != nil {
		return err
	}
	c := s.files
	c.mu.Lock()
	if s.inLRU {
		c.unlinkLocked(s)
	}
	s.cached = false
	s.refs--
	c.mu.Unlock()
	return nil
}

// takeFilesLocked takes the segment out of the cache's list and returns
// its open files to close; files.mu is held.
func (s *segment) takeFilesLocked() []vfs.File {
	if s.inLRU {
		s.files.unlinkLocked(s)
	}
	var out []vfs.File
	for _, f := range []vfs.File{s.f, s.ridxF, s.lidxF} {
		if f != nil {
			out = append(out, f)
		}
	}
	s.f, s.ridxF, s.lidxF = nil, nil, nil
	return out
}

// closeIndexFiles closes a segment's index files (readers read only the
// data file of a segment that is not closed for them any more).
func (s *segment) closeIndexFiles() {
	s.files.mu.Lock()
	var fs []vfs.File
	for _, f := range []vfs.File{s.ridxF, s.lidxF} {
		if f != nil {
			fs = append(fs, f)
		}
	}
	s.ridxF, s.lidxF = nil, nil
	s.files.mu.Unlock()
	closeAll(fs)
}

// dropIndexFiles closes and removes a segment's index files (it became the
// active segment again, or is being deleted).
func (s *segment) dropIndexFiles(fsys vfs.FS) {
	s.closeIndexFiles()
	s.nUser = 0
	_ = fsys.Remove(s.base + ".ridx")
	_ = fsys.Remove(s.base + ".lidx")
}

func (s *segment) summary() segSummary {
	return segSummary{
		count: s.last + 1 - s.hdr.first, lastTerm: s.lastTerm, end: s.end,
		endOffset: s.endOffset, maxTs: s.maxTs, lastCRC: s.lastCRC,
	}
}

// writeIndexFiles writes a closing segment's index files and keeps them
// open (a rolled segment goes to the file cache with its files open: the
// next reads are likely of it). They are not synced: a missing or torn index file is rebuilt at
// Open, so this stays off the hot path.
func (s *segment) writeIndexFiles(fsys vfs.FS, stream uint64, ridx []ridxEnt, lidx []lidxEnt) error {
	write := func(ext string, b []byte) (vfs.File, error) {
		f, err := fsys.Create(s.base + ext)
		if err != nil {
			return nil, err
		}
		if _, err := f.WriteAt(b, 0); err != nil {
			_ = f.Close()
			return nil, err
		}
		return f, nil
	}
	rf, err := write(".ridx", encodeRidx(stream, s.hdr.first, s.summary(), ridx))
	if err != nil {
		return err
	}
	failpoint.Inject("indexFlush", func(val failpoint.Value) {
		failpoints.Hit("storage/indexFlush")
		failpoints.CrashOn(val) // .ridx written, .lidx not: Open rebuilds them
		if failpoints.EIO(val) {
			_ = rf.Close()
			failpoint.Return(failpoints.IOError())
		}
	})
	lf, err := write(".lidx", encodeLidx(stream, s.hdr.first, lidx))
	if err != nil {
		_ = rf.Close()
		return err
	}
	s.ridxF, s.lidxF, s.nUser = rf, lf, int64(len(lidx))
	return nil
}

// loadIndexFiles verifies a closed segment's index files and takes the
// segment's end from them. ok is false if they are missing or
// invalid (the caller rebuilds them by scanning).
func (s *segment) loadIndexFiles(fsys vfs.FS, stream uint64) bool {
	rf, err := fsys.Open(s.base + ".ridx")
	if err != nil {
		return false
	}
	lf, err := fsys.Open(s.base + ".lidx")
	if err != nil {
		_ = rf.Close()
		return false
	}
	maxEnts := uint64(s.allocated/recHeaderSize) + 1
	rb, err1 := readIndexFile(rf, ridxMagic, ridxHeaderSize, ridxEntrySize, stream, s.hdr.first, maxEnts)
	lb, err2 := readIndexFile(lf, lidxMagic, lidxHeaderSize, lidxEntrySize, stream, s.hdr.first, maxEnts)
	if err1 != nil || err2 != nil {
		_ = rf.Close()
		_ = lf.Close()
		return false
	}
	sum := decodeSummary(rb)
	if sum.end > s.allocated || sum.end < segHeaderSize || le.Uint32(rb[68:]) != ridxEntrySize ||
		le.Uint32(lb[32:]) != lidxEntrySize {
		_ = rf.Close()
		_ = lf.Close()
		return false
	}
	s.last = s.hdr.first + sum.count - 1
	s.lastTerm, s.end, s.endOffset, s.maxTs, s.lastCRC = sum.lastTerm, sum.end, sum.endOffset, sum.maxTs, sum.lastCRC
	s.nUser = int64(le.Uint64(lb[24:]))
	// Readers open them again through the cache when they need them.
	_ = rf.Close()
	_ = lf.Close()
	return true
}
