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
//   - With BytesPerSec, they are paced to that rate as well: the operator's
//     lever to keep a catch-up from taking the disk's bandwidth from the
//     writers (whose fdatasyncs a tailing consumer's latency depends on).
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
// at once (<= 0: DefaultCatchUpReadBytes), paced to bytesPerSec (<= 0: not
// paced).
func NewReadBudget(inFlight, bytesPerSec int64) *ReadBudget {
	if inFlight <= 0 {
		inFlight = DefaultCatchUpReadBytes
	}
	return &ReadBudget{limit: inFlight, rate: max(bytesPerSec, 0)}
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
	if b.rate > 0 {
		b.mu.Lock()
		now := time.Now()
		start := b.next
		if start.Before(now) {
			start = now
		}
		b.next = start.Add(time.Duration(float64(n) / float64(b.rate) * float64(time.Second)))
		b.mu.Unlock()
		if d := start.Sub(now); d > 0 {
			waited = true
			b.waiting.Add(1)
			time.Sleep(d)
			b.waiting.Add(-1)
		}
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

// pread reads len(buf) bytes at off from f in pieces of at most
// readPiece (or the budget), each within the budget. It is called with no
// lock of the log held. A nil budget reads with one pread.
func (b *ReadBudget) pread(f vfs.File, buf []byte, off int64) error {
	if b == nil {
		return preadFull(f, buf, off)
	}
	piece := min(readPiece, int(b.limit))
	for k := 0; k < len(buf); k += piece {
		n := min(piece, len(buf)-k)
		release := b.acquire(int64(n))
		err := preadFull(f, buf[k:k+n], off+int64(k))
		release()
		if err != nil {
			return err
		}
	}
	return nil
}

// aheadWindow caps the kernel read ahead hinted for a catch-up reader at
// the budget (unbounded without one).
func (b *ReadBudget) aheadWindow(w int64) int64 {
	if b == nil {
		return w
	}
	return min(w, b.limit)
}
