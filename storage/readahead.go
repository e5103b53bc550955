package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// Catch-up read pipelining. A consumer catching up asks for the next chunk
// only once it has the previous one; the pread and the checksum check of
// each chunk were on that critical path. After a pooled catch-up read from
// the disk, the log starts reading the chunk after it (same size, same
// high watermark) in the background; the consumer's next fetch, if it asks
// for exactly that, takes it (waiting for the rest of it if needed). The
// background read is readDisk itself (its plan under the read lock, its
// preads without it), so writers never wait for it. Reads ahead are
// bounded server-wide (aheadBudget bytes at once): past it, none is
// started. A read ahead nobody takes within aheadTTL (its consumer went
// away) is dropped, so it cannot hold the budget for ever.

const (
	aheadSlots  = 4        // per log: consumers reading ahead at once
	aheadBudget = 64 << 20 // bytes of reads ahead held, all logs
	aheadTTL    = 2 * time.Second
)

var aheadHeld atomic.Int64

type aheadRead struct {
	offset, hwm int64
	maxBytes    int
	done        chan struct{}
	reserved    int64
	// set before done closes
	batches []Batch
	rb      *ReadBuf
	err     error
}

type aheadReads struct {
	mu    sync.Mutex
	slots [aheadSlots]*aheadRead
	next  int
}

// take returns the read ahead started for exactly this read, removing it.
func (a *aheadReads) take(offset, hwm int64, maxBytes int) *aheadRead {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, r := range a.slots {
		if r != nil && r.offset == offset && r.maxBytes == maxBytes && r.hwm <= hwm {
			a.slots[k] = nil
			return r
		}
	}
	return nil
}

// readAheadFrom starts reading [offset, hwm) up to maxBytes in the
// background, unless it is being read already or the budget is spent.
func (l *Log) readAheadFrom(offset, hwm int64, maxBytes int) {
	if !l.readAhead || offset >= hwm {
		return
	}
	a := &l.ahead
	a.mu.Lock()
	for _, r := range a.slots {
		if r != nil && r.offset == offset && r.maxBytes == maxBytes {
			a.mu.Unlock()
			return
		}
	}
	n := int64(maxBytes)
	if aheadHeld.Add(n) > aheadBudget {
		aheadHeld.Add(-n)
		a.mu.Unlock()
		return
	}
	r := &aheadRead{offset: offset, hwm: hwm, maxBytes: maxBytes, done: make(chan struct{}), reserved: n}
	old := a.slots[a.next]
	a.slots[a.next] = r
	a.next = (a.next + 1) % aheadSlots
	a.mu.Unlock()
	if old != nil {
		go old.drop() // another reader's, unclaimed: let it go
	}
	go func() {
		r.batches, r.rb, r.err = l.readDisk(offset, hwm, maxBytes, true)
		close(r.done)
		time.AfterFunc(aheadTTL, func() {
			if a.remove(r) {
				r.drop()
			}
		})
	}()
}

// remove takes r out of its slot; false if it was taken already.
func (a *aheadReads) remove(r *aheadRead) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, x := range a.slots {
		if x == r {
			a.slots[k] = nil
			return true
		}
	}
	return false
}

// wait returns the read's result; the budget it held is given back.
func (r *aheadRead) wait() ([]Batch, *ReadBuf, error) {
	<-r.done
	aheadHeld.Add(-r.reserved)
	return r.batches, r.rb, r.err
}

func (r *aheadRead) drop() {
	_, rb, _ := r.wait()
	rb.Release()
}
