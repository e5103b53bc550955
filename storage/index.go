package storage

// Per-segment indexes. The active segment's live in memory (ridx, lidx
// slices on the Log); a closed segment's are written to <first>.ridx and
// <first>.lidx when it is rolled and looked up with preads afterwards, so a
// closed segment costs O(1) memory however many records it holds.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/vdl-project/vdl/vfs"
)

const (
	ridxMagic      = "VDLRIDX1"
	lidxMagic      = "VDLLIDX1"
	ridxHeaderSize = 72
	lidxHeaderSize = 40
	ridxEntrySize  = 32
	lidxEntrySize  = 48
	idxTrailerSize = 8
)

// ridxEnt locates Raft entry first+i: O(1) by position in the file.
type ridxEnt struct {
	pos    int64 // record start in the segment
	term   uint64
	base   int64  // first offset taken (or the running offset)
	count  uint32 // offsets taken
	length uint32 // payload bytes
}

func (e ridxEnt) next() int64 { return e.base + int64(e.count) }

// lidxEnt is one user entry: sorted by offset and by maxTs (running max),
// so both Read and OffsetForTime binary-search it.
type lidxEnt struct {
	base, next int64
	pos        int64 // payload start (record start + 48)
	index      uint64
	maxTs      int64 // running max batch timestamp up to this entry
	length     uint32
}

// segSummary is what a closed segment's ridx header records about its end.
type segSummary struct {
	count     uint64 // entries; last = first+count-1
	lastTerm  uint64
	end       int64 // position after the last record
	endOffset int64
	maxTs     int64
	lastCRC   uint32
}

func encodeRidx(stream, first uint64, s segSummary, ents []ridxEnt) []byte {
	b := make([]byte, ridxHeaderSize+len(ents)*ridxEntrySize+idxTrailerSize)
	copy(b, ridxMagic)
	le.PutUint64(b[8:], stream)
	le.PutUint64(b[16:], first)
	le.PutUint64(b[24:], s.count)
	le.PutUint64(b[32:], s.lastTerm)
	le.PutUint64(b[40:], uint64(s.end))
	le.PutUint64(b[48:], uint64(s.endOffset))
	le.PutUint64(b[56:], uint64(s.maxTs))
	le.PutUint32(b[64:], s.lastCRC)
	le.PutUint32(b[68:], ridxEntrySize)
	p := b[ridxHeaderSize:]
	for _, e := range ents {
		le.PutUint64(p[0:], uint64(e.pos))
		le.PutUint64(p[8:], e.term)
		le.PutUint64(p[16:], uint64(e.base))
		le.PutUint32(p[24:], e.count)
		le.PutUint32(p[28:], e.length)
		p = p[ridxEntrySize:]
	}
	sealIndex(b)
	return b
}

func decodeRidxEnt(p []byte) ridxEnt {
	return ridxEnt{
		pos: int64(le.Uint64(p[0:])), term: le.Uint64(p[8:]), base: int64(le.Uint64(p[16:])),
		count: le.Uint32(p[24:]), length: le.Uint32(p[28:]),
	}
}

func encodeLidx(stream, first uint64, ents []lidxEnt) []byte {
	b := make([]byte, lidxHeaderSize+len(ents)*lidxEntrySize+idxTrailerSize)
	copy(b, lidxMagic)
	le.PutUint64(b[8:], stream)
	le.PutUint64(b[16:], first)
	le.PutUint64(b[24:], uint64(len(ents)))
	le.PutUint32(b[32:], lidxEntrySize)
	p := b[lidxHeaderSize:]
	for _, e := range ents {
		le.PutUint64(p[0:], uint64(e.base))
		le.PutUint64(p[8:], uint64(e.next))
		le.PutUint64(p[16:], uint64(e.pos))
		le.PutUint64(p[24:], e.index)
		le.PutUint64(p[32:], uint64(e.maxTs))
		le.PutUint32(p[40:], e.length)
		p = p[lidxEntrySize:]
	}
	sealIndex(b)
	return b
}

func decodeLidxEnt(p []byte) lidxEnt {
	return lidxEnt{
		base: int64(le.Uint64(p[0:])), next: int64(le.Uint64(p[8:])), pos: int64(le.Uint64(p[16:])),
		index: le.Uint64(p[24:]), maxTs: int64(le.Uint64(p[32:])), length: le.Uint32(p[40:]),
	}
}

// sealIndex fills the trailer: crc32c of everything before it, then "VIDX".
func sealIndex(b []byte) {
	t := len(b) - idxTrailerSize
	le.PutUint32(b[t:], crc32.Checksum(b[:t], castagnoli))
	copy(b[t+4:], "VIDX")
}

var errBadIndex = errors.New("bad index file")

// readIndexFile reads and checks a whole index file. maxEntries bounds the
// allocation by what the segment could hold.
func readIndexFile(f vfs.File, magic string, hdrSize, entSize int, stream, first, maxEntries uint64) ([]byte, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size < int64(hdrSize+idxTrailerSize) {
		return nil, errBadIndex
	}
	hdr := make([]byte, hdrSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, errBadIndex
	}
	count := le.Uint64(hdr[24:])
	if string(hdr[:8]) != magic || le.Uint64(hdr[8:]) != stream || le.Uint64(hdr[16:]) != first ||
		count > maxEntries || size != int64(hdrSize)+int64(count)*int64(entSize)+idxTrailerSize {
		return nil, errBadIndex
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n != len(b) && err != nil && err != io.EOF {
		return nil, err
	} else if n != len(b) {
		return nil, errBadIndex
	}
	t := len(b) - idxTrailerSize
	if le.Uint32(b[t:]) != crc32.Checksum(b[:t], castagnoli) || string(b[t+4:]) != "VIDX" {
		return nil, errBadIndex
	}
	return b, nil
}

func decodeSummary(b []byte) segSummary {
	return segSummary{
		count: le.Uint64(b[24:]), lastTerm: le.Uint64(b[32:]), end: int64(le.Uint64(b[40:])),
		endOffset: int64(le.Uint64(b[48:])), maxTs: int64(le.Uint64(b[56:])), lastCRC: le.Uint32(b[64:]),
	}
}

// preadFull reads exactly len(b) bytes at off.
func preadFull(f vfs.File, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
}

// preadDirect reads b at off from f past the page cache (b, off aligned:
// vfs.File.ReadDirect); the file may end inside b, not before need bytes.
func preadDirect(f vfs.File, b []byte, off int64, need int) error {
	n, err := f.ReadDirect(b, off)
	if n >= need && (err == nil || err == io.EOF) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
}

// ridxRange returns the entries for indexes [lo, lo+n) of a closed
// segment, which the caller has acquired (as for lidxRange, lidxSearch).
func (s *segment) ridxRange(lo uint64, n int) ([]ridxEnt, error) {
	b := make([]byte, n*ridxEntrySize)
	if err := preadFull(s.ridxF, b, ridxHeaderSize+int64(lo-s.hdr.first)*ridxEntrySize); err != nil {
		return nil, err
	}
	out := make([]ridxEnt, n)
	for i := range out {
		out[i] = decodeRidxEnt(b[i*ridxEntrySize:])
	}
	return out, nil
}

// ridxAt returns the entry for index i of a closed segment, acquiring it
// for the pread.
func (s *segment) ridxAt(i uint64) (ridxEnt, error) {
	if err := s.acquire(); err != nil {
		return ridxEnt{}, err
	}
	defer s.release()
	var b [ridxEntrySize]byte
	if err := preadFull(s.ridxF, b[:], ridxHeaderSize+int64(i-s.hdr.first)*ridxEntrySize); err != nil {
		return ridxEnt{}, err
	}
	return decodeRidxEnt(b[:]), nil
}

func (s *segment) lidxRange(k, n int) ([]lidxEnt, error) {
	b := make([]byte, n*lidxEntrySize)
	if err := preadFull(s.lidxF, b, lidxHeaderSize+int64(k)*lidxEntrySize); err != nil {
		return nil, err
	}
	out := make([]lidxEnt, n)
	for i := range out {
		out[i] = decodeLidxEnt(b[i*lidxEntrySize:])
	}
	return out, nil
}

// lidxSearch finds the first user entry of a closed segment for which f is
// true (f monotone), with O(log n) preads.
func (s *segment) lidxSearch(f func(lidxEnt) bool) (int, error) {
	var ioErr error
	k := sort.Search(int(s.nUser), func(k int) bool {
		if ioErr != nil {
			return true
		}
		e, err := s.lidxRange(k, 1)
		if err != nil {
			ioErr = err
			return true
		}
		return f(e[0])
	})
	return k, ioErr
}
