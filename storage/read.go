package storage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/canary"
)

// Readers hold mu.RLock for the whole call, preads included.

// InitialState implements raft.Storage.
func (l *Log) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, nil, ErrClosed
	}
	hs := &pb.HardState{}
	if l.st.term != 0 || l.st.vote != 0 || l.st.commit != 0 {
		hs.Term, hs.Vote, hs.Commit = new(l.st.term), new(l.st.vote), new(l.st.commit)
	}
	return hs, confAt(l.confs, math.MaxUint64), nil
}

// FirstIndex implements raft.Storage.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.segs[0].hdr.first, nil
}

// LastIndex implements raft.Storage.
func (l *Log) LastIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.active().last, nil
}

// Snapshot implements raft.Storage: the metadata of the log's start (the
// retention point). Data is empty; segment shipping fills it later.

// Term implements raft.Storage.
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	return l.termLocked(i)
}

// termLocked needs mu or wmu held.
func (l *Log) termLocked(i uint64) (uint64, error) {
	first, act := l.segs[0].hdr.first, l.active()
	switch {
	case i+1 < first:
		return 0, raft.ErrCompacted
	case i+1 == first:
		return l.segs[0].hdr.prevTerm, nil
	case i > act.last:
		return 0, raft.ErrUnavailable
	case i >= act.hdr.first:
		return l.ridx[i-act.hdr.first].term, nil
	}
	if e, ok := l.cache.get(i); ok {
		return e.term, nil
	}
	s := l.segFor(i)
	if i == s.last {
		return s.lastTerm, nil
	}
	e, err := s.ridxAt(i)
	return e.term, err
}

// segFor returns the segment holding entry i (first <= i <= last).
func (l *Log) segFor(i uint64) *segment {
	k := sort.Search(len(l.segs), func(k int) bool { return l.segs[k].hdr.first > i })
	return l.segs[k-1]
}

// ridxRun returns up to max ridx entries from index lo within lo's segment.
func (l *Log) ridxRun(s *segment, lo uint64, n int) ([]ridxEnt, error) {
	n = int(min(uint64(n), s.last+1-lo))
	if s == l.active() {
		return l.ridx[lo-s.hdr.first : lo-s.hdr.first+uint64(n)], nil
	}
	return s.ridxRange(lo, n)
}

// Entries implements raft.Storage.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	if lo < l.segs[0].hdr.first {
		return nil, raft.ErrCompacted
	}
	if hi > l.active().last+1 {
		return nil, raft.ErrUnavailable
	}
	var out []*pb.Entry
	var size uint64
	add := func(e *pb.Entry) bool {
		s := uint64(proto.Size(e))
		if len(out) > 0 && size+s > maxSize {
			return false
		}
		size += s
		out = append(out, e)
		return true
	}
	for i := lo; i < hi; {
		if ce, ok := l.cache.get(i); ok {
			if !add(makeEntry(i, ce.term, ce.typ, ce.flags, ce.data)) {
				break
			}
			i++
			continue
		}
		stop := hi
		if l.cache.len() > 0 && l.cache.first > i {
			stop = min(hi, l.cache.first)
		}
		ents, err := l.readEntries(i, stop, maxSize-min(size, maxSize))
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if !add(e) {
				return out, nil
			}
		}
		i += uint64(len(ents))
	}
	return out, nil
}

func makeEntry(index, term uint64, typ, flags uint8, data []byte) *pb.Entry {
	e := &pb.Entry{Term: new(term), Index: new(index)}
	if flags&flagTypeSet != 0 {
		t := pb.EntryNormal
		switch typ {
		case recConfChange:
			t = pb.EntryConfChange
		case recConfChangeV2:
			t = pb.EntryConfChangeV2
		}
		e.Type = t.Enum()
	}
	if flags&flagDataSet != 0 {
		e.Data = data
		if e.Data == nil {
			e.Data = []byte{}
		}
	}
	return e
}

// readEntries reads at least one entry from [lo, hi) off the disk, within
// lo's segment and about budget bytes, with one pread.
func (l *Log) readEntries(lo, hi, budget uint64) ([]*pb.Entry, error) {
	s := l.segFor(lo)
	rs, err := l.ridxRun(s, lo, int(min(hi-lo, 1024)))
	if err != nil {
		return nil, err
	}
	m, total := 1, uint64(rs[0].length)
	for m < len(rs) && total+uint64(rs[m].length)+16 <= budget {
		total += uint64(rs[m].length) + 16
		m++
	}
	start, end := rs[0].pos, rs[m-1].pos+int64(recHeaderSize)+int64(rs[m-1].length)
	if start < segHeaderSize || end > s.cap || end < start {
		return nil, l.corrupt(s.base+".ridx", 0, "entry %d points outside the segment", lo)
	}
	buf := make([]byte, end-start)
	if err := preadFull(s.f, buf, start); err != nil {
		return nil, err
	}
	out := make([]*pb.Entry, 0, m)
	for k := 0; k < m; k++ {
		h, rec, err := l.checkRecord(s, buf, start, rs[k].pos, lo+uint64(k))
		if err != nil {
			return nil, err
		}
		data := rec[recHeaderSize : recHeaderSize+int(h.length) : recHeaderSize+int(h.length)]
		if h.typ == recUser {
			data = rec[recHeaderSize-1 : recHeaderSize+int(h.length) : recHeaderSize+int(h.length)]
		}
		out = append(out, makeEntry(h.index, h.term, h.typ, h.flags, data))
	}
	return out, nil
}

// checkRecord verifies the record at pos (inside buf, read from bufStart)
// is entry index with a good crc: an index pointing at the wrong place, or
// damaged data, is reported, never returned.
func (l *Log) checkRecord(s *segment, buf []byte, bufStart, pos int64, index uint64) (recHeader, []byte, error) {
	o := pos - bufStart
	if o < 0 || o+recHeaderSize > int64(len(buf)) {
		return recHeader{}, nil, l.corrupt(s.base+".seg", pos, "index points outside the read")
	}
	rec := buf[o:]
	h := decodeRecHeader(rec)
	if !headerPlausible(rec, math.MaxInt64) || int64(recHeaderSize)+int64(h.length) > int64(len(rec)) ||
		h.index != index || h.typ == recState ||
		recordCRC(l.stream, rec, rec[recHeaderSize:recHeaderSize+int(h.length)]) != h.crc {
		return h, nil, l.corrupt(s.base+".seg", pos, "record for index %d fails its check", index)
	}
	return h, rec, nil
}

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
// never holds up the writer.
func (l *Log) Read(offset, hwm int64, maxBytes int) ([]Batch, error) {
	maxBytes = min(maxBytes, l.maxRead)
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, ErrClosed
	}
	start, end := l.startLocked(), l.active().endOffset
	hwm = min(hwm, end)
	if offset < start || offset > hwm {
		l.mu.RUnlock()
		return nil, fmt.Errorf("%w: offset %d, readable [%d, %d]", ErrOutOfRange, offset, start, hwm)
	}
	if offset == hwm {
		l.mu.RUnlock()
		return nil, nil
	}
	if l.cache.covers(offset) {
		defer l.mu.RUnlock()
		return l.readCache(offset, hwm, maxBytes), nil
	}
	l.mu.RUnlock()
	return l.readDisk(offset, hwm, maxBytes)
}

// readDisk is the catch-up path: sequential preads into fresh buffers,
// never touching the tail cache. It plans under the read lock (mu must not
// be held) and reads without it.
func (l *Log) readDisk(offset, hwm int64, maxBytes int) ([]Batch, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, ErrClosed
	}
	if start := l.startLocked(); offset < start { // retention ran since the caller looked
		l.mu.RUnlock()
		return nil, fmt.Errorf("%w: offset %d, readable from %d", ErrOutOfRange, offset, start)
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
		return nil, err
	}
	var out []Batch
	for _, r := range runs {
		if err := l.readRun(r.s, r.closed, r.ents, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (l *Log) readCache(offset, hwm int64, maxBytes int) []Batch {
	var out []Batch
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
// hwm. Each segment read is acquired; the caller releases it.
func (l *Log) planDisk(offset, hwm int64, maxBytes int) ([]diskRun, error) {
	var runs []diskRun
	total := 0
	si := sort.Search(len(l.segs), func(k int) bool { return l.segs[k].endOffset > offset })
	for ; si < len(l.segs); si++ {
		s := l.segs[si]
		s.acquire()
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

// readRun reads the records of ents (user entries of s, in order) with one
// pread and appends their batches. It runs without the log's lock: s is
// acquired, and the entries read are committed, so never rewritten.
func (l *Log) readRun(s *segment, closed bool, ents []lidxEnt, out *[]Batch) error {
	start := ents[0].pos - recHeaderSize
	last := ents[len(ents)-1]
	end := last.pos + int64(last.length)
	if start < segHeaderSize || end > s.cap || end < start {
		return l.corrupt(s.base+".lidx", 0, "offset %d points outside the segment", ents[0].base)
	}
	buf := make([]byte, end-start)
	if err := preadFull(s.f, buf, start); err != nil {
		return err
	}
	if closed && !l.keepPageCache {
		// A catch-up reader reads on from here: start reading as much ahead
		// while it handles this, so its next read finds it in memory, and
		// give back the pages just read (closed segments are kept out of
		// the page cache: see KeepPageCache). Hints only.
		_ = s.f.DropCache(start, end-start)
		_ = s.f.Prefetch(end, min(end-start, s.end-end))
	}
	for _, e := range ents {
		if canary.On(canary.ServeCorrupt) { // broken on purpose: no checksum on read
			o := e.pos - start
			*out = append(*out, Batch{BaseOffset: e.base, NextOffset: e.next, Data: buf[o : o+int64(e.length) : o+int64(e.length)]})
			continue
		}
		h, rec, err := l.checkRecord(s, buf, start, e.pos-recHeaderSize, e.index)
		if err != nil {
			return err
		}
		if h.typ != recUser || h.base != e.base || h.length != e.length {
			return l.corrupt(s.base+".seg", e.pos-recHeaderSize, "record is not user entry at offset %d", e.base)
		}
		n := recHeaderSize + int(h.length)
		*out = append(*out, Batch{BaseOffset: e.base, NextOffset: e.next, Data: rec[recHeaderSize:n:n]})
	}
	return nil
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

// Committed is the commit index of the newest hard state written: every
// entry up to it is committed, the same on every replica.
func (l *Log) Committed() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.commit
}

// CommittedEntries serves a snapshot install on another replica: entries
// from index from up to to (inclusive), never past this replica's commit
// index, about maxBytes in all (at least one), and the term of entry
// from-1. Committed entries are the same on every replica, so an install
// may take each chunk from a different one; an uncommitted suffix (an old
// leader's) is never served. ErrOutOfRange: from is below the log start
// (retention deleted it). ErrNotCommitted: from is past the commit index
// here (this replica is behind; another may serve it).
func (l *Log) CommittedEntries(from, to, maxBytes uint64) ([]*pb.Entry, uint64, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, 0, ErrClosed
	}
	first, commit := l.segs[0].hdr.first, min(l.st.commit, l.active().last)
	l.mu.RUnlock()
	switch {
	case from == 0 || to < from:
		return nil, 0, fmt.Errorf("%w: entries [%d, %d]", ErrOutOfRange, from, to)
	case from < first:
		return nil, 0, fmt.Errorf("%w: entry %d, log starts at %d", ErrOutOfRange, from, first)
	case from > commit:
		return nil, 0, fmt.Errorf("%w: entry %d, committed up to %d", ErrNotCommitted, from, commit)
	}
	prev, err := l.Term(from - 1)
	if err == nil {
		var ents []*pb.Entry
		if ents, err = l.Entries(from, min(to, commit)+1, maxBytes); err == nil {
			return ents, prev, nil
		}
	}
	if errors.Is(err, raft.ErrCompacted) {
		return nil, 0, fmt.Errorf("%w: entry %d: %v", ErrOutOfRange, from, err)
	}
	return nil, 0, err
}
