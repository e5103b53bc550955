package storage

import "fmt"

// DeleteBefore deletes whole head segments whose every user record is
// below offset. It never deletes the active segment, nor a segment holding
// an entry not yet durably applied (a restart would need it). The new start
// is recorded in the meta file before any file goes, so an interrupted
// deletion is finished by the next Open.
func (l *Log) DeleteBefore(offset int64) (int, error) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return 0, err
	}
	offset = min(offset, l.active().endOffset)
	m := l.meta
	if offset > m.logStart {
		// The retention point itself is replicated state: every replica
		// records it, whatever its segment boundaries allow it to delete.
		m.logStart = offset
		if err := l.retryNoSpace(func() error { return saveMeta(l.fs, l.dir, &m) }); err != nil {
			return 0, l.fail(err)
		}
		l.mu.Lock()
		l.meta = m
		l.mu.Unlock()
	}
	applied := l.durableApplied.Load()
	k := 0
	for k < len(l.segs)-1 && l.segs[k].endOffset <= offset && l.segs[k].last <= applied {
		k++
	}
	if k == 0 {
		return 0, nil
	}
	ns := l.segs[k]
	m.retFirst, m.retPrevTerm, m.retStart = ns.hdr.first, ns.hdr.prevTerm, ns.hdr.firstOffset
	// Keep the conf state in force at the new snapshot index and later ones.
	m.confs = nil
	for i, c := range l.confs {
		if c.index >= ns.hdr.first || i == len(l.confs)-1 || l.confs[i+1].index > ns.hdr.first-1 {
			m.confs = append(m.confs, c)
		}
	}
	if err := l.retryNoSpace(func() error { return saveMeta(l.fs, l.dir, &m) }); err != nil {
		return 0, err
	}
	l.mu.Lock()
	dropped := l.segs[:k]
	l.segs = append([]*segment(nil), l.segs[k:]...)
	l.cache.dropBefore(ns.hdr.first)
	l.meta, l.confs = m, m.confs
	l.mu.Unlock()
	for _, s := range dropped { // oldest first: a crash leaves a suffix
		s.retire()
		dropSegFiles(l.fs, s.base)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return k, fmt.Errorf("storage: retention: %w", err)
	}
	return k, nil
}

// SegmentInfo describes one segment for retention policies.
type SegmentInfo struct {
	FirstOffset, EndOffset int64
	Bytes                  int64 // bytes the segment's records take
	// MaxTimestamp is the largest record timestamp up to the segment's
	// end (a running max: every record in it is at most this old).
	MaxTimestamp int64
	Active       bool
}

// Segments describes the log's segments, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil
	}
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{FirstOffset: s.hdr.firstOffset, EndOffset: s.endOffset, Bytes: s.end - segHeaderSize,
			MaxTimestamp: s.maxTs, Active: i == len(l.segs)-1}
	}
	return out
}

// RetentionPolicy is a stream's retention: records older than MaxAge ms,
// or beyond the newest MaxBytes, are deleted (whole segments). Zero (or
// negative) fields disable.
type RetentionPolicy struct {
	MaxAge   int64 // ms
	MaxBytes int64
}

// RetentionPoint returns the offset below which p deletes the oldest
// segments at nowMs (Unix ms), or 0 for none: only closed segments, only
// below hwm (committed records), and MaxBytes keeps at least that much.
// The leader proposes it as a replicated retention command.
func RetentionPoint(segs []SegmentInfo, p RetentionPolicy, nowMs, hwm int64) int64 {
	var total int64
	for _, s := range segs {
		total += s.Bytes
	}
	var before int64
	for _, s := range segs {
		if s.Active || s.EndOffset > hwm {
			break
		}
		old := p.MaxAge > 0 && s.MaxTimestamp < nowMs-p.MaxAge
		big := p.MaxBytes > 0 && total-s.Bytes >= p.MaxBytes
		if !old && !big {
			break
		}
		total -= s.Bytes
		before = s.EndOffset
	}
	return before
}
