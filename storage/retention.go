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
		if err := saveMeta(l.fs, l.dir, &m); err != nil {
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
	if err := saveMeta(l.fs, l.dir, &m); err != nil {
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
