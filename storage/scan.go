package storage

// Scanning a segment's records at recovery: the chain walk, the search for
// valid records beyond its end, the window reader both read through, and
// the data map that spares them the zeros.

import (
	"fmt"
	"io"
	"sync"

	"github.com/vdl-project/vdl/vfs"
)

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
	limit int64 // the data's end: a window stops there unless the bytes asked for go past it (0: none)
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
