package storage

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

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
	cap  int64 // usable bytes (file size)

	last       uint64 // last entry index (hdr.first-1 if none)
	lastTerm   uint64
	lastCRC    uint32 // crc of the last record (entry or state)
	end        int64  // position after the last record
	endOffset  int64
	maxTs      int64 // running max timestamp after the last user record
	startMaxTs int64 // running max at the segment start (its first state record)

	// closed segments only: the index files, open for preads
	ridxF, lidxF vfs.File
	nUser        int64

	// Readers read a segment's data without the log's lock, holding a
	// reference; a segment retired meanwhile (deleted, truncated away, the
	// log closed) closes its files when the last one lets go.
	refMu   sync.Mutex
	refs    int
	retired bool
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

// acquire keeps the segment's files open for a reader; release lets go.
func (s *segment) acquire() {
	s.refMu.Lock()
	s.refs++
	s.refMu.Unlock()
}

func (s *segment) release() {
	s.refMu.Lock()
	defer s.refMu.Unlock()
	s.refs--
	if s.refs == 0 && s.retired {
		s.closeFiles()
	}
}

// retire closes the segment's files now, or when its last reader lets go.
func (s *segment) retire() {
	s.refMu.Lock()
	defer s.refMu.Unlock()
	s.retired = true
	if s.refs == 0 {
		s.closeFiles()
	}
}

func (s *segment) closeFiles() {
	for _, f := range []vfs.File{s.f, s.ridxF, s.lidxF} {
		if f != nil {
			_ = f.Close()
		}
	}
	s.f, s.ridxF, s.lidxF = nil, nil, nil
}

// dropIndexFiles closes and removes a segment's index files (it became the
// active segment again, or is being deleted).
func (s *segment) dropIndexFiles(fsys vfs.FS) {
	s.refMu.Lock() // readers read only the data file; closeFiles may run on one
	for _, f := range []vfs.File{s.ridxF, s.lidxF} {
		if f != nil {
			_ = f.Close()
		}
	}
	s.ridxF, s.lidxF, s.nUser = nil, nil, 0
	s.refMu.Unlock()
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
// open. They are not synced: a missing or torn index file is rebuilt at
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

// loadIndexFiles opens and verifies a closed segment's index files and
// takes the segment's end from them. ok is false if they are missing or
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
	maxEnts := uint64(s.cap/recHeaderSize) + 1
	rb, err1 := readIndexFile(rf, ridxMagic, ridxHeaderSize, ridxEntrySize, stream, s.hdr.first, maxEnts)
	lb, err2 := readIndexFile(lf, lidxMagic, lidxHeaderSize, lidxEntrySize, stream, s.hdr.first, maxEnts)
	if err1 != nil || err2 != nil {
		_ = rf.Close()
		_ = lf.Close()
		return false
	}
	sum := decodeSummary(rb)
	if sum.end > s.cap || sum.end < segHeaderSize || le.Uint32(rb[68:]) != ridxEntrySize ||
		le.Uint32(lb[32:]) != lidxEntrySize {
		_ = rf.Close()
		_ = lf.Close()
		return false
	}
	s.last = s.hdr.first + sum.count - 1
	s.lastTerm, s.end, s.endOffset, s.maxTs, s.lastCRC = sum.lastTerm, sum.end, sum.endOffset, sum.maxTs, sum.lastCRC
	s.ridxF, s.lidxF, s.nUser = rf, lf, int64(le.Uint64(lb[24:]))
	return true
}
