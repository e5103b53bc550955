package campaign

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vdl-project/vdl/checker"
)

// startProgress prints a line every opts.ProgressEvery while the run
// lasts: elapsed time, operations ok, failed and unknown (in flight
// counted apart), the faults in force, and the anomalies found so far
// (failed steps, and acknowledged produces that contradict each other: two
// values acknowledged at one offset of a stream). It returns the stop.
func (r *runner) startProgress() (stop func()) {
	if r.opts.Progress == nil {
		return func() {}
	}
	every := r.opts.ProgressEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(r.opts.Progress, r.progressLine())
			}
		}
	}()
	return func() { close(done); <-finished }
}

// progress is what the progress lines have counted so far: ops completed
// before first are counted; from first on, counted[i] says whether op i
// was (ops complete out of order).
type progress struct {
	first               int
	counted             []bool
	ok, failed, unknown int
	inconsistent        int
	acked               map[streamOffset]string
}

type streamOffset struct {
	stream string
	offset int64
}

func (r *runner) progressLine() string {
	p := r.prog
	if p == nil {
		p = &progress{acked: map[streamOffset]string{}}
		r.prog = p
	}
	pending, firstOpen := 0, -1
	n := r.history.Scan(p.first, func(i int, op *checker.Op) {
		for len(p.counted) <= i {
			p.counted = append(p.counted, false)
		}
		if p.counted[i] {
			return
		}
		if op.Outcome == checker.OutcomeInfo && op.Complete == op.Invoke && op.Err == "" {
			pending++ // not completed yet
			if firstOpen < 0 {
				firstOpen = i
			}
			return
		}
		p.counted[i] = true
		switch op.Outcome {
		case checker.OutcomeOK:
			p.ok++
		case checker.OutcomeFail:
			p.failed++
		default:
			p.unknown++
		}
		if op.Kind == checker.KindProduce && op.Outcome == checker.OutcomeOK {
			k := streamOffset{op.Stream, op.Offset}
			if v, seen := p.acked[k]; seen && v != op.Value {
				p.inconsistent++
			}
			p.acked[k] = op.Value
		}
	})
	if firstOpen < 0 {
		firstOpen = n
	}
	p.first = max(p.first, firstOpen)
	r.mu.Lock()
	anomalies := len(r.found) + p.inconsistent
	r.mu.Unlock()
	return fmt.Sprintf("[%s] %6.0fs ops ok=%d failed=%d unknown=%d in-flight=%d | faults: %s | anomalies so far: %d",
		time.Now().UTC().Format("15:04:05"), time.Since(r.t0).Seconds(), p.ok, p.failed, p.unknown, pending, r.currentFaults(), anomalies)
}

// syncWriter serialises writes (the progress line is written from its own
// goroutine).
type syncWriter struct {
	mu sync.Mutex
	b  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
