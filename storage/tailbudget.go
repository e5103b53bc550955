package storage

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// TailBudget is the memory of the tail caches of a server's logs, shared by
// recency of writes: a stream being written keeps its newest records up to
// the whole budget, taking memory from the streams written least recently.
// With a budget per stream (8 MiB each, as before) a consumer a fraction
// of a second behind a fast producer read from the disk, while idle
// streams held memory they did not need.
//
// Eviction runs in the writer that went over the budget, with its log's
// lock held: it takes memory from other logs only if their lock is free
// (TryLock, so two writers evicting from each other never wait), oldest
// writes first, then from its own log. It frees down to a sixteenth
// below the limit, so it runs once per limit/16 bytes written, not per
// write.
type TailBudget struct {
	limit int64
	used  atomic.Int64
	clock atomic.Uint64 // recency: each write's tick

	mu   sync.Mutex
	logs []*Log
}

// NewTailBudget returns a budget of limit bytes (at least 1 MiB).
func NewTailBudget(limit int64) *TailBudget {
	return &TailBudget{limit: max(limit, 1<<20)}
}

// Limit is the budget's size.
func (b *TailBudget) Limit() int64 { return b.limit }

// Used is the bytes the logs' tail caches hold now.
func (b *TailBudget) Used() int64 { return b.used.Load() }

func (b *TailBudget) register(l *Log) {
	b.mu.Lock()
	b.logs = append(b.logs, l)
	b.mu.Unlock()
}

func (b *TailBudget) unregister(l *Log) {
	b.mu.Lock()
	b.logs = slices.DeleteFunc(b.logs, func(x *Log) bool { return x == l })
	b.mu.Unlock()
}

// makeRoom brings the budget back under its limit after self (whose mu is
// held for writing) added to its cache.
func (b *TailBudget) makeRoom(self *Log) {
	if b.used.Load() <= b.limit {
		return
	}
	target := b.limit - b.limit/16
	type victim struct {
		l    *Log
		tick uint64
	}
	b.mu.Lock()
	victims := make([]victim, len(b.logs))
	for k, l := range b.logs {
		victims[k] = victim{l, l.lastWrite.Load()}
	}
	b.mu.Unlock()
	slices.SortFunc(victims, func(x, y victim) int { return cmp.Compare(x.tick, y.tick) })
	for _, vv := range victims {
		v := vv.l
		if b.used.Load() <= target {
			return
		}
		if v == self || !v.mu.TryLock() {
			continue
		}
		v.cache.shrink(b, target)
		v.mu.Unlock()
	}
	self.cache.shrink(b, target)
}
