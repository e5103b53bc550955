package storage

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/vfs"
)

// Raft reads. They hold mu.RLock for the whole call, preads included
// (Kafka reads, read_kafka.go, pread without it).

// InitialState implements raft.Storage. The ConfState is the log's own:
// read it, never change it (see confAt).
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
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
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
	buf, from, err := l.readSpan(s, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Entry, 0, m)
	for k := 0; k < m; k++ {
		h, rec, err := l.checkRecord(s, buf, from, rs[k].pos, lo+uint64(k))
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

// readSpan reads [start, end) of s into a new buffer, which starts at
// file offset from: a closed segment past the page cache (diskSpan), so a
// follower catching up from the start of the log does not fill the page
// cache with old data.
func (l *Log) readSpan(s *segment, start, end int64) (buf []byte, from int64, err error) {
	sp := l.span(s != l.active(), start, end)
	if sp.direct {
		buf, _ = vfs.AlignedBuf(make([]byte, sp.size()+vfs.DirectAlign), sp.size())
	} else {
		buf = make([]byte, sp.size())
	}
	return buf, sp.from, readAt(s.f, buf, sp.from, sp.need(), sp.direct)
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
