package storage

import "fmt"

// Leader epochs (KIP-320). A stream's Kafka leader epoch is the Raft term,
// and every entry records its term (ridx), so the epoch history that Kafka
// keeps in a leader-epoch-checkpoint file is already in the log: the start
// offset of epoch T is the base offset of the first entry of term T. Terms
// never decrease along the log, so both queries below are binary searches
// over the Raft indexes stored (a few index reads each); they survive a
// restart (the indexes are recovered) and retention (the first segment's
// header keeps the term before it).

// EpochEnd answers OffsetForLeaderEpoch for term: floor is the largest term
// ≤ term that the stored log holds (0 when the log holds none: retention
// deleted it, or the log starts after it), and end is the first offset of
// the first entry whose term is greater than term, or the log end offset
// when there is none. The caller bounds end by what consumers may see.
func (l *Log) EpochEnd(term uint64) (floor uint64, end int64, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, ErrClosed
	}
	first, act := l.segs[0].hdr.first, l.active()
	// Smallest index in [first, last+1) whose term is > term.
	lo, hi := first, act.last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		t, err := l.termLocked(mid)
		if err != nil {
			return 0, 0, fmt.Errorf("storage: epoch end: %w", err)
		}
		if t > term {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo > act.last {
		end = act.endOffset
	} else if end, _, err = l.entryOffsetsLocked(lo); err != nil {
		return 0, 0, err
	}
	// The entry before lo (the first segment's prevTerm when lo is the
	// first stored entry) has the largest term ≤ term, if it is stored.
	if floor, err = l.termLocked(lo - 1); err != nil {
		return 0, 0, fmt.Errorf("storage: epoch end: %w", err)
	}
	if floor > term {
		floor = 0
	}
	return floor, end, nil
}

// TermAt returns the term of the entry holding offset (the leader epoch
// stamped into its batches), or 0 when offset is not stored.
func (l *Log) TermAt(offset int64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, ErrClosed
	}
	first, act := l.segs[0].hdr.first, l.active()
	if offset < l.segs[0].hdr.firstOffset || offset >= act.endOffset {
		return 0, nil
	}
	// Smallest index whose entry ends past offset: the one holding it.
	lo, hi := first, act.last
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, next, err := l.entryOffsetsLocked(mid)
		if err != nil {
			return 0, err
		}
		if next > offset {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	t, err := l.termLocked(lo)
	if err != nil {
		return 0, fmt.Errorf("storage: term at offset: %w", err)
	}
	return t, nil
}
