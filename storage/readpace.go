package storage

import "time"

// yieldPacer decides how fast a server's catch-up reads may read the disk
// so that they yield to its writes: a catch-up consumer reads at the
// disk's speed while the writers do not suffer from it, and is slowed,
// down to yieldFloor, while they do.
//
// Why writes: a tailing consumer's latency is the producer's commit, and
// the commit waits for fdatasyncs (three replicas' on one disk here); a
// sequential reader keeps the device busy and the fdatasyncs queue behind
// its reads (docs/storage.md, "Write latency under catch-up reads": write
// p99 13-25 ms beside an unpaced reader, under 1 ms beside one paced at
// 100 MiB/s). A fixed rate either wastes a fast disk or is too much for
// a slow one; the writers' own latency says which.
//
// The signal is how many fdatasyncs of new writes (ReadBudget.noteSync)
// are slow: a reader leaves the median sync as it was and makes one in
// fifty wait 15-25 ms behind its reads, so it is the tail that moves, and
// the tail a consumer sees. A sync is slow past twice the baseline (and
// yieldSlack more), the baseline being the slowest sync of steps with
// writes and no catch-up read, smoothed. Each step (at least yieldStep and
// yieldSamples syncs, at most yieldMaxStep) decides: more than one sync in
// a hundred slow while catch-up reads ran halves the rate (starting from
// what the reads did in the step); otherwise it grows by a quarter, and
// past yieldCeil the reads are not paced at all; a step with no catch-up
// read or no write lifts the pace (nothing to yield to, or no reads to
// slow). With no baseline yet (no quiet step seen) nothing is paced. So
// the reads settle at the rate where the writes' p99 is near twice idle.
//
// Time comes in as arguments: the pacer has no clock of its own, so its
// tests step it exactly. It is not safe for concurrent use (ReadBudget
// holds its lock around it).
type yieldPacer struct {
	stepStart time.Time
	syncs     int           // this step's syncs
	slow      int           // how many of them were slow
	slowest   time.Duration // the slowest of them
	read      int64         // this step's catch-up bytes read

	base time.Duration // quiet steps' slowest sync, smoothed; 0: none yet
	rate int64         // bytes/s; 0: not paced
}

const (
	yieldStep    = 100 * time.Millisecond
	yieldMaxStep = time.Second
	yieldSamples = 100
	yieldSlack   = 5 * time.Millisecond
	yieldFloor   = 8 << 20 // bytes/s: a catch-up always moves
	yieldCeil    = 2 << 30 // bytes/s: faster than any disk reads here
	// yieldMaxDelay bounds the wait of one read for the yielding pace
	// (ReadBudget.delayLocked).
	yieldMaxDelay = time.Second
)

// noteSync counts a sync that took d.
func (p *yieldPacer) noteSync(now time.Time, d time.Duration) {
	p.advance(now)
	p.syncs++
	p.slowest = max(p.slowest, d)
	if p.base > 0 && d > 2*p.base && d > p.base+yieldSlack {
		p.slow++
	}
}

// noteRead counts n bytes of catch-up reads.
func (p *yieldPacer) noteRead(now time.Time, n int64) {
	p.advance(now)
	p.read += n
}

// pace is the rate catch-up reads may read at now, bytes/s; 0: unpaced.
func (p *yieldPacer) pace(now time.Time) int64 {
	p.advance(now)
	return p.rate
}

// advance closes the step when it is over and adjusts the rate.
func (p *yieldPacer) advance(now time.Time) {
	if p.stepStart.IsZero() {
		p.stepStart = now
		return
	}
	elapsed := now.Sub(p.stepStart)
	if elapsed < yieldStep || p.syncs < yieldSamples && elapsed < yieldMaxStep {
		return
	}
	switch {
	case p.read == 0:
		if p.syncs > 0 {
			p.learnBase(p.slowest)
		}
		p.rate = 0
	case p.syncs == 0:
		p.rate = 0
	case p.slow*100 > p.syncs:
		p.lower(p.read * int64(time.Second) / int64(elapsed))
	default:
		p.raise()
	}
	p.stepStart, p.syncs, p.slow, p.slowest, p.read = now, 0, 0, 0, 0
}

// learnBase folds a quiet step's slowest sync into the baseline.
func (p *yieldPacer) learnBase(slowest time.Duration) {
	if p.base == 0 {
		p.base = slowest
		return
	}
	p.base += (slowest - p.base) / 4
}

// lower halves the rate, or what the reads did (measured) if that is less.
func (p *yieldPacer) lower(measured int64) {
	if p.rate == 0 || measured < p.rate {
		p.rate = measured
	}
	p.rate = max(p.rate/2, yieldFloor)
}

func (p *yieldPacer) raise() {
	if p.rate == 0 {
		return
	}
	if p.rate += p.rate / 4; p.rate >= yieldCeil {
		p.rate = 0
	}
}
