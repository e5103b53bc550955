package storage

import "fmt"

// Invariants of the engine's own bookkeeping, asserted at the boundaries
// where a bug would otherwise reach the disk or a reader: before a chunk of
// records is written and once it is published (the pair brackets every
// write), and when recovery hands the log over at Open. They are cheap
// enough to stay on in production: O(1) per write, one pass over the active
// segment's indexes per Open.
//
// A broken invariant is a bug in this package, not damage on the disk
// (that is ErrCorrupt, an error the caller handles), so it panics: carrying
// on would write or serve a log the engine no longer describes.

// invariantf panics, naming the log and the broken invariant.
func (l *Log) invariantf(format string, args ...any) {
	panic(fmt.Sprintf("storage: invariant broken in %s: %s", l.dir, fmt.Sprintf(format, args...)))
}

// The assertions are never inlined: a caller holding failpoint markers
// (writeChunk) counts as a big function for the inliner in the production
// build but not without the markers, which would make the markers change
// the machine code (TestMarkersCompileAway).

// assertActiveEnd: the active segment's in-memory index covers exactly its
// entries, and the segment's end offset is where its last entry's offsets
// end. O(1); the writer's lock held.
//
//go:noinline
func (l *Log) assertActiveEnd(act *segment, when string) {
	if want := act.last + 1 - act.hdr.first; uint64(len(l.ridx)) != want {
		l.invariantf("%s: the active segment holds entries [%d, %d] but its index has %d", when, act.hdr.first, act.last, len(l.ridx))
	}
	end := act.hdr.firstOffset
	if n := len(l.ridx); n > 0 {
		end = l.ridx[n-1].next()
	}
	if end != act.endOffset {
		l.invariantf("%s: the active segment's offsets end at %d, its index says %d", when, act.endOffset, end)
	}
}

// assertNextIndex: a record about to be written for entry index follows
// the entry before it (last).
//
//go:noinline
func (l *Log) assertNextIndex(index, last uint64) {
	if index != last+1 {
		l.invariantf("before a write: entry %d encoded after entry %d", index, last)
	}
}

// assertRecovered: the active segment's indexes, as recovery rebuilt
// them, are continuous: each entry's offsets start where the previous
// entry's end (from the segment header's first offset), records do not go
// back, terms do not decrease, and every user entry's lidx entry agrees
// with its ridx entry. One pass; at Open.
func (l *Log) assertRecovered() {
	act := l.active()
	l.assertActiveEnd(act, "after recovery")
	next, term, pos := act.hdr.firstOffset, act.hdr.prevTerm, int64(segHeaderSize)
	for i, e := range l.ridx {
		index := act.hdr.first + uint64(i)
		if e.base != next || e.term < term || e.pos < pos {
			l.invariantf("after recovery: entry %d (offset %d, term %d, at %d) does not continue offset %d, term %d, position %d",
				index, e.base, e.term, e.pos, next, term, pos)
		}
		next, term, pos = e.next(), e.term, e.pos+recSize(int(e.length))
	}
	for _, u := range l.lidx {
		i := u.index - act.hdr.first
		if u.index < act.hdr.first || i >= uint64(len(l.ridx)) {
			l.invariantf("after recovery: user entry %d is outside the active segment [%d, %d]", u.index, act.hdr.first, act.last)
		}
		if r := l.ridx[i]; r.base != u.base || r.next() != u.next || r.pos+recHeaderSize != u.pos || r.length != u.length {
			l.invariantf("after recovery: entry %d: ridx says offsets [%d, %d) at %d, lidx [%d, %d) at %d", u.index, r.base, r.next(), r.pos, u.base, u.next, u.pos)
		}
	}
}
