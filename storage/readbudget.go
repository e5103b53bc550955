package storage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/vdl-project/vdl/vfs"
)

// ReadBudget is the IO budget of a server's catch-up reads: the disk reads
// of fetches (a consumer reading what the tail cache no longer holds, and
// the reads ahead started for it), shared by all the logs of a server.
//
//   - At most InFlight bytes of them read the disk at once; a read that
//     does not fit waits, first come first served, until earlier ones are
//     done (a read larger than the budget runs alone). The kernel's read
//     ahead hinted for them (readAhead) is capped at the same size. So
//     however many consumers catch up, the read work queued at the device
//     ahead of the writers' fdatasyncs stays bounded.
//   - They yield to the writers (yieldPacer, on by default): while more
//     than one in a hundred of the logs' fdatasyncs take over twice as
//     long as without catch-up reads, the reads are paced, at a rate that
//     halves while it lasts and grows back when it is over. A tailing
//     consumer's latency is the commit, which waits for those fdatasyncs.
//   - With BytesPerSec, they are paced to that rate at most: the
//     operator's fixed cap.
//
// What never waits on it: reads from the tail cache (a tailing consumer's),
// the Raft loop and the writers (replication reads entries by another
// path, and a catch-up read waits here with no lock of the log held: it
// has planned its preads under the read lock and let it go). A waiting
// read holds up only its own connection's responses.
//
// It is IO-layer only: the simulator's logs have none (Options.ReadBudget
// nil), and it changes no decision of the Raft core.
type ReadBudget struct {
	limit int64
	rate  int64 // bytes/s; 0: unpaced

	mu    sync.Mutex
	used  int64
	queue []*readWaiter // FIFO
	next  time.Time     // pacing: when the next read may start
	yield *yieldPacer   // nil: reads do not yield to writes

	waits   atomic.Int64 // reads that had to wait (in flight or paced)
	waiting atomic.Int64 // reads waiting now
}

// DefaultCatchUpReadBytes is ReadBudget's default in-flight bound: 16 1 MiB
// fetch reads, more than a disk reads in parallel with profit.
const DefaultCatchUpReadBytes = 16 << 20

type readWaiter struct {
	n     int64
	ready chan struct{}
}

// NewReadBudget returns a budget of inFlight bytes of catch-up disk reads
// at once (<= 0: DefaultCatchUpReadBytes), paced to bytesPerSec at most
// (<= 0: no fixed cap) and, with yield, yielding to the writes.
func NewReadBudget(inFlight, bytesPerSec int64, yield bool) *ReadBudget {
	if inFlight <= 0 {
		inFlight = DefaultCatchUpReadBytes
	}
	b := &ReadBudget{limit: inFlight, rate: max(bytesPerSec, 0)}
	if yield {
		b.yield = &yieldPacer{}
	}
	return b
}

// noteSync tells the budget a log's fdatasync of new writes took d.
func (b *ReadBudget) noteSync(d time.Duration) {
	if b == nil || b.yield == nil {
		return
	}
	b.mu.Lock()
	b.yield.noteSync(time.Now(), d)
	b.mu.Unlock()
}

// Pace is the rate catch-up reads are paced to now, bytes/s (the fixed
// cap or the rate they yield at, the lower); 0: not paced.
func (b *ReadBudget) Pace() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rate, _ := b.paceLocked(time.Now())
	return rate
}

// paceLocked is the pace now and whether it is the yielding one (below
// the fixed cap, if any).
func (b *ReadBudget) paceLocked(now time.Time) (rate int64, yielding bool) {
	rate = b.rate
	if b.yield != nil {
		if y := b.yield.pace(now); y > 0 && (rate == 0 || y < rate) {
			return y, true
		}
	}
	return rate, false
}

// Limit is the in-flight bound in bytes.
func (b *ReadBudget) Limit() int64 { return b.limit }

// Waits is how many reads have waited for the budget; Waiting how many
// wait now.
func (b *ReadBudget) Waits() int64   { return b.waits.Load() }
func (b *ReadBudget) Waiting() int64 { return b.waiting.Load() }

// acquire waits until n bytes may be read (paced, then in flight) and
// returns the function that gives them back. A nil budget grants all.
func (b *ReadBudget) acquire(n int64) func() {
	if b == nil {
		return func() {}
	}
	n = min(max(n, 1), b.limit)
	waited := false
	b.mu.Lock()
	d := b.delayLocked(n, time.Now())
	b.mu.Unlock()
	if d > 0 {
		waited = true
		b.waiting.Add(1)
		time.Sleep(d)
		b.waiting.Add(-1)
	}
	b.mu.Lock()
	if len(b.queue) == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
	} else {
		w := &readWaiter{n: n, ready: make(chan struct{})}
		b.queue = append(b.queue, w)
		b.mu.Unlock()
		waited = true
		b.waiting.Add(1)
		<-w.ready
		b.waiting.Add(-1)
	}
	if waited {
		b.waits.Add(1)
	}
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }
}

// delayLocked books a read of n bytes starting at now or after the reads
// booked before it, at the pace of now, and returns how long it waits.
// Yielding to writes, no read waits more than yieldMaxDelay: with many
// consumers catching up at once the pace then gives way to a bounded
// delay, so their fetches are late but never outwait the clients' request
// timeouts (a fixed cap, the operator's, holds however long the queue).
func (b *ReadBudget) delayLocked(n int64, now time.Time) time.Duration {
	if b.yield != nil {
		b.yield.noteRead(now, n)
	}
	rate, yielding := b.paceLocked(now)
	if rate == 0 {
		return 0
	}
	start := b.next
	if start.Before(now) {
		start = now
	}
	if yielding && start.Sub(now) > yieldMaxDelay {
		start = now.Add(yieldMaxDelay)
	}
	b.next = start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	return start.Sub(now)
}

func (b *ReadBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	for len(b.queue) > 0 && b.used+b.queue[0].n <= b.limit {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.used += w.n
		close(w.ready)
	}
}

// readPiece is the most a catch-up read asks of the disk at once under a
// budget: a larger read is made of several preads, each taking its bytes
// of the budget (at most the budget) while it runs, so what the budget
// bounds is what the device has queued for catch-up readers, not how much
// one read may ask for.
const readPiece = 1 << 20

// pread reads sp from f into buf (sp's size), in pieces of at most
// readPiece (or the budget; whole blocks for a direct read), each within
// the budget. It is called with no lock of the log held. A nil budget
// reads with one pread.
func (b *ReadBudget) pread(f vfs.File, buf []byte, sp diskSpan) error {
	need := sp.need()
	if b == nil {
		return readAt(f, buf, sp.from, need, sp.direct)
	}
	piece := min(readPiece, int(b.limit))
	if sp.direct {
		piece = max(vfs.AlignDown(piece), vfs.DirectAlign)
	}
	for k := 0; k < need; k += piece {
		n := min(piece, len(buf)-k)
		release := b.acquire(int64(n))
		err := readAt(f, buf[k:k+n], sp.from+int64(k), min(n, need-k), sp.direct)
		release()
		if err != nil {
			return err
		}
	}
	return nil
}

// aheadWindow caps the kernel read ahead hinted for a catch-up reader at
// the budget (unbounded without one) and, while the reads are paced, at
// what they may read in a tenth of a second: the device reads a hint all
// at once, and a paced reader must not burst ahead of its pace there.
func (b *ReadBudget) aheadWindow(w int64) int64 {
	if b == nil {
		return w
	}
	w = min(w, b.limit)
	if rate := b.Pace(); rate > 0 {
		w = min(w, max(rate/10, readPiece))
	}
	return w
}
