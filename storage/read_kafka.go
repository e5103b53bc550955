package storage

import (
	"fmt"
	"slices"
	"sort"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/vfs"
)

// Kafka reads: offsets, Read (tail cache or catch-up preads planned under
// the read lock and done without it) and OffsetForTime.

// StartOffset is the first Kafka offset still stored.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	return l.startLocked()
}

// startLocked is the first readable offset: the first stored record, or the
// replicated retention point if that is further (retention deletes only
// whole segments, and segment boundaries differ between replicas, so the
// point itself is what every replica agrees on).
func (l *Log) startLocked() int64 {
	return max(l.segs[0].hdr.firstOffset, l.meta.logStart)
}

// EndOffset is the next offset to be assigned.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0
	}
	return l.active().endOffset
}

// NextOffsetAt returns the offset after all user records of entries <=
// index: the high watermark for commit index `index`.
func (l *Log) NextOffsetAt(index uint64) (int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	first, act := l.segs[0].hdr.first, l.active()
	switch {
	case index+1 < first || index > act.last:
		return 0, fmt.Errorf("%w: index %d, log holds [%d, %d]", ErrOutOfRange, index, first, act.last)
	case index == act.last:
		return act.endOffset, nil
	case index+1 == first:
		return l.segs[0].hdr.firstOffset, nil
	case index >= act.hdr.first:
		return l.ridx[index-act.hdr.first].next(), nil
	case index+1 == act.hdr.first:
		return act.hdr.firstOffset, nil
	}
	if e, ok := l.cache.get(index); ok {
		return e.next, nil
	}
	s := l.segFor(index)
	if index == s.last {
		return s.endOffset, nil
	}
	e, err := s.ridxAt(index)
	return e.next(), err
}

// EntryOffsets returns the offsets entry index takes (base == next if none).
func (l *Log) EntryOffsets(index uint64) (base, next int64, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, ErrClosed
	}
	return l.entryOffsetsLocked(index)
}

// entryOffsetsLocked needs mu held.
func (l *Log) entryOffsetsLocked(index uint64) (base, next int64, err error) {
	first, act := l.segs[0].hdr.first, l.active()
	if index < first || index > act.last {
		return 0, 0, fmt.Errorf("%w: index %d, log holds [%d, %d]", ErrOutOfRange, index, first, act.last)
	}
	if index >= act.hdr.first {
		e := l.ridx[index-act.hdr.first]
		return e.base, e.next(), nil
	}
	if e, ok := l.cache.get(index); ok {
		return e.base, e.next, nil
	}
	e, err := l.segFor(index).ridxAt(index)
	return e.base, e.next(), err
}

// Read returns whole user batches from the entry holding offset up to hwm
// (exclusive), about maxBytes (at most Options.MaxReadBytes), at least one
// entry if any is below hwm. Reads from the tail cache are copies-free under
// the read lock; disk reads plan what to read under it and do their preads
// without it (the segments read stay open until then), so a catch-up read
// never holds up the writer. The memory returned is the caller's to keep.
func (l *Log) Read(offset, hwm int64, maxBytes int) ([]Batch, error) {
	bs, _, err := l.read(offset, hwm, maxBytes, false)
	return bs, err
}

// ReadPooled is Read into pooled memory: the batches alias rb (a buffer the
// disk reads were made into, and the slice itself), which the caller gives
// back with rb.Release once it has written them out, and must not use
// after. rb may be nil (nothing read); Release of nil is a no-op.
func (l *Log) ReadPooled(offset, hwm int64, maxBytes int) ([]Batch, *ReadBuf, error) {
	return l.read(offset, hwm, maxBytes, true)
}

func (l *Log) read(offset, hwm int64, maxBytes int, pooled bool) ([]Batch, *ReadBuf, error) {
	maxBytes = min(maxBytes, l.maxRead)
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, nil, ErrClosed
	}
	start, end := l.startLocked(), l.active().endOffset
	hwm = min(hwm, end)
	if offset < start || offset > hwm {
		l.mu.RUnlock()
		return nil, nil, fmt.Errorf("%w: offset %d, readable [%d, %d]", ErrOutOfRange, offset, start, hwm)
	}
	if offset == hwm {
		l.mu.RUnlock()
		return nil, nil, nil
	}
	if l.cache.covers(offset) {
		defer l.mu.RUnlock()
		l.stats.hits.Add(1)
		var rb *ReadBuf
		if pooled {
			rb = getReadBuf(0)
		} else {
			rb = &ReadBuf{class: unpooled}
		}
		rb.batches = l.readCache(rb.batches, offset, hwm, maxBytes)
		return rb.batches, rb, nil
	}
	l.mu.RUnlock()
	l.stats.misses.Add(1)
	if !pooled {
		return l.readDisk(offset, hwm, maxBytes, false)
	}
	var bs []Batch
	var rb *ReadBuf
	var err error
	if r := l.ahead.take(offset, hwm, maxBytes); r != nil {
		bs, rb, err = r.wait()
		if err == nil && len(bs) > 0 && offset >= l.StartOffset() {
			l.readAheadFrom(bs[len(bs)-1].NextOffset, hwm, maxBytes)
			return bs, rb, nil
		}
		rb.Release() // failed or retention ran: read it again, here
	}
	if bs, rb, err = l.readDisk(offset, hwm, maxBytes, true); err == nil && len(bs) > 0 {
		l.readAheadFrom(bs[len(bs)-1].NextOffset, hwm, maxBytes)
	}
	return bs, rb, err
}

// readDisk is the catch-up path: sequential preads into one pooled buffer,
// never touching the tail cache. It plans under the read lock (mu must not
// be held) and reads without it.
func (l *Log) readDisk(offset, hwm int64, maxBytes int, pooled bool) ([]Batch, *ReadBuf, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, nil, ErrClosed
	}
	if start := l.startLocked(); offset < start { // retention ran since the caller looked
		l.mu.RUnlock()
		return nil, nil, fmt.Errorf("%w: offset %d, readable from %d", ErrOutOfRange, offset, start)
	}
	runs, err := l.planDisk(offset, hwm, maxBytes)
	l.mu.RUnlock()
	defer func() {
		for _, r := range runs {
			if r.first {
				r.s.release()
			}
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	total, size := int64(0), 0
	for _, r := range runs {
		span, err := l.runSpan(r.s, r.ents)
		if err != nil {
			return nil, nil, err
		}
		total += span
		size += vfs.AlignUp(l.runDiskSpan(r, span).size())
	}
	l.stats.diskRead.Add(total)
	if size > 0 {
		size += vfs.DirectAlign // room to align the buffer's start
	}
	var rb *ReadBuf
	if pooled {
		rb = getReadBuf(size)
	} else {
		rb = &ReadBuf{buf: make([]byte, size), class: unpooled}
	}
	buf, _ := vfs.AlignedBuf(rb.buf, max(size-vfs.DirectAlign, 0))
	for _, r := range runs {
		span, _ := l.runSpan(r.s, r.ents)
		sp := l.runDiskSpan(r, span)
		slot := sp.size()
		if rb.batches, err = l.readRun(r, sp, buf[:slot:slot], rb.batches); err != nil {
			rb.Release()
			return nil, nil, err
		}
		buf = buf[vfs.AlignUp(slot):]
	}
	return rb.batches, rb, nil
}

func (l *Log) readCache(out []Batch, offset, hwm int64, maxBytes int) []Batch {
	total := 0
	for k := l.cache.find(offset); k < l.cache.len(); k++ {
		e := l.cache.at(k)
		if e.typ != recUser {
			continue
		}
		if e.next > hwm {
			break
		}
		n := len(e.data) - 1
		if len(out) > 0 && total+n > maxBytes {
			break
		}
		out = append(out, Batch{BaseOffset: e.base, NextOffset: e.next, Data: e.payload()})
		total += n
	}
	return out
}

// diskRun is a run of user entries of one segment to read with one pread;
// first marks the run that holds the segment (acquired) for the read.
type diskRun struct {
	s      *segment
	closed bool
	first  bool
	ents   []lidxEnt
}

// planDisk decides a catch-up read (mu held): the runs of whole user
// entries from the one holding offset, about maxBytes, none at or past
// hwm. Each segment read is acquired (its files opened if the file cache
// had closed them); the caller releases it.
func (l *Log) planDisk(offset, hwm int64, maxBytes int) ([]diskRun, error) {
	var runs []diskRun
	total := 0
	si := sort.Search(len(l.segs), func(k int) bool { return l.segs[k].endOffset > offset })
	for ; si < len(l.segs); si++ {
		s := l.segs[si]
		if err := s.acquire(); err != nil {
			return runs, err
		}
		n := len(runs)
		full, err := l.planSegment(s, offset, hwm, maxBytes, &runs, &total)
		if len(runs) > n {
			runs[n].first = true
		} else {
			s.release()
		}
		if err != nil || full {
			return runs, err
		}
		offset = s.endOffset
	}
	return runs, nil
}

// planSegment appends the runs of s's user entries from offset on; full
// says the read is complete (hwm or maxBytes reached).
func (l *Log) planSegment(s *segment, offset, hwm int64, maxBytes int, runs *[]diskRun, total *int) (bool, error) {
	active := s == l.active()
	var k, n int
	if active {
		n = len(l.lidx)
		k = sort.Search(n, func(k int) bool { return l.lidx[k].next > offset })
	} else {
		n = int(s.nUser)
		var err error
		if k, err = s.lidxSearch(func(e lidxEnt) bool { return e.next > offset }); err != nil {
			return true, err
		}
	}
	for k < n {
		var ents []lidxEnt
		if active {
			ents = l.lidx[k:]
		} else {
			var err error
			if ents, err = s.lidxRange(k, min(n-k, 256)); err != nil {
				return true, err
			}
		}
		m, full, size := 0, false, *total
		for m < len(ents) {
			e := ents[m]
			if e.next > hwm {
				full = true
				break
			}
			if (len(*runs) > 0 || m > 0) && size+int(e.length) > maxBytes {
				full = true
				break
			}
			size += int(e.length)
			m++
		}
		if m > 0 {
			// A copy: the active segment's index changes once the lock goes.
			*runs = append(*runs, diskRun{s: s, closed: !active, ents: slices.Clone(ents[:m])})
			*total = size
		}
		if full {
			return true, nil
		}
		k += len(ents)
	}
	return false, nil
}

// runSpan is the byte range of s the records of ents take, checked
// against the segment.
func (l *Log) runSpan(s *segment, ents []lidxEnt) (int64, error) {
	start := ents[0].pos - recHeaderSize
	last := ents[len(ents)-1]
	end := last.pos + int64(last.length)
	if start < segHeaderSize || end > s.cap || end < start {
		return 0, l.corrupt(s.base+".lidx", 0, "offset %d points outside the segment", ents[0].base)
	}
	return end - start, nil
}

// runDiskSpan is how r, whose records take span bytes, is read.
func (l *Log) runDiskSpan(r diskRun, span int64) diskSpan {
	start := r.ents[0].pos - recHeaderSize
	return l.span(r.closed, start, start+span)
}

// readRun reads the records of r (user entries of one segment, in order)
// as sp says, with one pread into buf (sp's size, aligned), and appends
// their batches. It runs without the log's lock: the segment is acquired,
// and the entries read are committed, so never rewritten.
func (l *Log) readRun(r diskRun, sp diskSpan, buf []byte, out []Batch) ([]Batch, error) {
	s, ents := r.s, r.ents
	if err := l.readBudget.pread(s.f, buf, sp); err != nil {
		return out, err
	}
	if r.closed && !sp.direct { // kept in the page cache: have the kernel read ahead of the reader
		s.readAhead(sp.end, sp.end-sp.start, l.readBudget.aheadWindow(readAheadMax))
	}
	from := sp.from // the file offset of buf[0]
	for _, e := range ents {
		if canary.On(canary.ServeCorrupt) { // broken on purpose: no checksum on read
			o := e.pos - from
			out = append(out, Batch{BaseOffset: e.base, NextOffset: e.next, Data: buf[o : o+int64(e.length) : o+int64(e.length)]})
			continue
		}
		h, rec, err := l.checkRecord(s, buf, from, e.pos-recHeaderSize, e.index)
		if err != nil {
			return out, err
		}
		if h.typ != recUser || h.base != e.base || h.length != e.length {
			return out, l.corrupt(s.base+".seg", e.pos-recHeaderSize, "record is not user entry at offset %d", e.base)
		}
		n := recHeaderSize + int(h.length)
		out = append(out, Batch{BaseOffset: e.base, NextOffset: e.next, Data: rec[recHeaderSize:n:n]})
	}
	return out, nil
}

// OffsetForTime returns the first offset whose batch maxTimestamp (as a
// running max) is >= ts, or EndOffset. Binary search: segments by their
// end maxTs, then the segment's lidx.
func (l *Log) OffsetForTime(ts int64) (int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	off, err := l.offsetForTimeLocked(ts)
	return max(off, l.startLocked()), err
}

func (l *Log) offsetForTimeLocked(ts int64) (int64, error) {
	si := sort.Search(len(l.segs), func(k int) bool { return l.segs[k].maxTs >= ts })
	if si == len(l.segs) {
		return l.active().endOffset, nil
	}
	s := l.segs[si]
	if s == l.active() {
		k := sort.Search(len(l.lidx), func(k int) bool { return l.lidx[k].maxTs >= ts })
		if k == len(l.lidx) {
			return s.endOffset, nil
		}
		return l.lidx[k].base, nil
	}
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.release()
	k, err := s.lidxSearch(func(e lidxEnt) bool { return e.maxTs >= ts })
	if err != nil {
		return 0, err
	}
	if k == int(s.nUser) {
		return s.endOffset, nil
	}
	e, err := s.lidxRange(k, 1)
	if err != nil {
		return 0, err
	}
	return e[0].base, nil
}

// Catch-up readahead. A consumer reading a stream from its start waits for
// each fetch's preads: with the kernel's own readahead (128 KiB) and a hint
// of one read ahead, 1 MiB fetches ran at a fraction of the disk's
// sequential speed, the disk idle while the response travelled and the
// client decoded it. A catch-up read now keeps a window of several reads
// ahead of it in flight (posix_fadvise WILLNEED starts the reads and
// returns), asked for in steps of a quarter window so that most fetches
// make no call. It runs without the log's lock (readRun's caller holds the
// segment, not the lock), so writers never wait for it.
const (
	readAheadMin = 4 << 20
	readAheadMax = 32 << 20
)

// readAhead hints that s will be read from end on by a reader reading n
// bytes at a time, at most maxWindow ahead (the read budget's size).
func (s *segment) readAhead(end, n, maxWindow int64) {
	window := min(max(8*n, readAheadMin), readAheadMax, maxWindow)
	want := min(end+window, s.end)
	old := s.hinted.Load()
	from := old
	if old < end || old > end+window {
		from = end // a new reader, or one that started over: hints of others are no guide
	}
	if want <= from || (want-from < window/4 && want < s.end) {
		return
	}
	if !s.hinted.CompareAndSwap(old, want) {
		return // another reader of the segment just did
	}
	_ = s.f.Prefetch(from, want-from)
}
