package kafka

import (
	"errors"
	"sync"
)

// budget bounds the bytes of requests a server holds at once, across all
// its connections: frames being read and requests read but not answered.
// A connection reserves a frame's whole announced length before reading
// its body (partial reservations of frames read in parallel could each
// hold part of the budget and wait for one another for ever); one that
// cannot waits — its socket is not read — until others' requests are
// answered: backpressure, never dropped work. One
// frame larger than the whole budget is still let in when nothing else is
// held (it is bounded by MaxFrameBytes), so no request can wait for ever.
type budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	freed chan struct{} // closed (and replaced) whenever bytes are released
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{})}
}

// errBudgetClosed: the connection went away while waiting for budget.
var errBudgetClosed = errors.New("kafka: connection closed while waiting for the server's request budget")

// acquire takes n bytes, waiting while the budget is used up; it gives up
// when done closes.
func (b *budget) acquire(n int64, done <-chan struct{}) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.limit || b.used == 0 {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-done:
			return errBudgetClosed
		}
	}
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// inUse returns the bytes held now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
