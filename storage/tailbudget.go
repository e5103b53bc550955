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
//
// It looks only at the logs whose caches hold bytes (holding): beside
// 10,000 idle streams, each eviction sorted and visited every log of the
// server, and the writers' evictions took 1.7% of the CPU of a hot load
// (BenchmarkStreams). An idle stream's few cached entries are the oldest
// and go in the first eviction; its log then leaves the list until it is
// written again.
type TailBudget struct {
	limit int64
	used  atomic.Int64
	clock atomic.Uint64 // recency: each write's tick

	mu      sync.Mutex
	holding []*Log // each one's heldAt is its position + 1
}

// NewTailBudget returns a budget of limit bytes (at least 1 MiB).
func NewTailBudget(limit int64) *TailBudget {
	return &TailBudget{limit: max(limit, 1<<20)}
}

// Limit is the budget's size.
func (b *TailBudget) Limit() int64 { return b.limit }

// Used is the bytes the logs' tail caches hold now.
func (b *TailBudget) Used() int64 { return b.used.Load() }

// hold adds l, whose cache now holds bytes, to the logs eviction looks at.
func (b *TailBudget) hold(l *Log) {
	b.mu.Lock()
	if l.heldAt == 0 {
		b.holding = append(b.holding, l)
		l.heldAt = len(b.holding)
	}
	b.mu.Unlock()
}

// release takes l, whose cache is now empty, off the list.
func (b *TailBudget) release(l *Log) {
	b.mu.Lock()
	if i := l.heldAt - 1; i >= 0 {
		last := b.holding[len(b.holding)-1]
		b.holding[i], last.heldAt = last, i+1
		b.holding[len(b.holding)-1] = nil
		b.holding = b.holding[:len(b.holding)-1]
		l.heldAt = 0
	}
	b.mu.Unlock()
}

// holdingLogs is how many logs' caches hold bytes.
func (b *TailBudget) holdingLogs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.holding)
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
	victims := make([]victim, len(b.holding))
	for k, l := range b.holding {
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
