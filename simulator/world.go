// Package simulator runs whole VDL clusters — the deterministic Raft core,
// the storage engine over the simulated disk, and the Kafka request pipeline
// (kafka.Session) with simulated clients — in one goroutine over simulated
// time, network and disk. One seed reproduces a run exactly; every history
// is checked with the checker package. See docs/simulation.md.
package simulator

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vdl-project/vdl/rng"
)

// event is one thing that happens at a simulated instant. Events run in
// (at, seq) order; seq is the order of scheduling, so ties are deterministic.
type event struct {
	at   int64
	seq  uint64
	node *node // the process the event runs in (nil: the world itself)
	inc  int   // the node's incarnation when scheduled; stale events are dropped
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// world is the event queue, the clock, the random streams and the trace.
type world struct {
	seed   uint64
	now    int64 // simulated nanoseconds
	seq    uint64
	q      eventHeap
	events uint64
	trace  hash.Hash
	lines  int
	out    func(string)
	faults map[string]int // injected faults by kind
	bug    *buggify
	// The watchdog's limits (watchdog.go).
	deadline  time.Time
	maxEvents uint64
}

func newWorld(seed uint64, out func(string)) *world {
	return &world{seed: seed, trace: sha256.New(), out: out, faults: map[string]int{}}
}

// stream returns the random stream called name (independent of all others).
func (w *world) stream(name string) *rand.Rand { return rng.New(w.seed, name) }

// at schedules fn at time t in process n (nil: the world).
func (w *world) at(t int64, n *node, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	e := &event{at: t, seq: w.seq, node: n, fn: fn}
	if n != nil {
		e.inc = n.inc
	}
	heap.Push(&w.q, e)
}

func (w *world) after(d time.Duration, n *node, fn func()) { w.at(w.now+int64(d), n, fn) }

// step runs the next event; false when the queue is empty or past until.
func (w *world) step(until int64) bool {
	if len(w.q) == 0 || w.q[0].at > until {
		return false
	}
	e := heap.Pop(&w.q).(*event)
	w.now = e.at
	if n := e.node; n != nil {
		if n.inc != e.inc || n.down {
			return true // the process that scheduled it is gone
		}
		if n.paused {
			n.held = append(n.held, e)
			return true
		}
	}
	w.events++
	if w.events%1024 == 0 {
		w.watch()
	}
	if e.node != nil {
		w.runIn(e.node, e.fn)
	} else {
		e.fn()
	}
	return true
}

// runIn runs fn in process n: a panic there kills the process (as it
// would kill a real server) and fails the run.
func (w *world) runIn(n *node, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(watchdogAbort); ok {
				panic(p) // the whole run stops
			}
			if n.s.corruptionPanic(n, p) {
				n.s.detect(n, "panic", fmt.Errorf("panic: %v", p))
				return
			}
			n.s.fail(checkPanic, "n%d panicked: %v", n.id, p)
			n.stop(false)
		}
	}()
	fn()
}

// run runs events until the clock passes until (or nothing is left).
func (w *world) run(until int64) {
	for w.step(until) {
	}
	if w.now < until {
		w.now = until
	}
}

// record adds a line to the trace (and prints it when tracing).
func (w *world) record(format string, args ...any) {
	line := fmt.Sprintf("%12.6f ", float64(w.now)/1e9) + fmt.Sprintf(format, args...)
	w.trace.Write([]byte(line))
	w.trace.Write([]byte{'\n'})
	w.lines++
	if w.out != nil {
		w.out(line)
	}
}

// fault counts an injected fault of kind and traces it.
func (w *world) fault(kind, format string, args ...any) {
	w.faults[kind]++
	w.record("FAULT %s: %s", kind, fmt.Sprintf(format, args...))
}

func (w *world) traceHash() string { return hex.EncodeToString(w.trace.Sum(nil)) }

// buggify is FoundationDB's BUGGIFY: each fault site is switched on (or not)
// once per run from the seed, and an enabled site fires with a probability
// drawn from the caller's own stream. Runs get different personalities.
type buggify struct {
	on map[string]bool
}

// buggifySites are the fault sites a run may switch on.
var buggifySites = []string{
	"net.duplicate",           // raft messages are sometimes delivered twice
	"net.delay-spike",         // a message sometimes takes 20-120ms longer
	"disk.slow-fsync",         // fsync sometimes takes 20-300ms
	"disk.stall",              // fsync rarely stalls for 0.5-2s
	"client.short-timeout",    // produce timeouts of 30-150ms: many unknown outcomes
	"client.deep-pipeline",    // clients pipeline up to 8 produces per connection
	"session.small-inflight",  // the session reads at most 2 requests ahead
	"storage.tiny-segments",   // 4 KiB segments: constant rolls, retention bites
	"core.small-messages",     // tiny append messages and inflight windows
	"core.sync-writes",        // raft's synchronous storage writes mode
	"core.low-uncommitted",    // tiny uncommitted budget: backpressure errors
	"disk.slow-snapshot-copy", // snapshot copies sometimes start 0.2-1.5s late
	"client.oversized",        // produces sometimes exceed the maximum entry: MESSAGE_TOO_LARGE
	"crash.after-vote",        // power loss right after a vote is reported durable
	"crash.after-conf-change", // power loss right after a membership change is written
	"core.one-campaign",       // a server starts one election at a time (campaign pacing)
	"client.large-values",     // values of 300-900 bytes among small ones: backpressure refuses a big one, a small one behind it fits
}

func newBuggify(r *rand.Rand, enabled bool) *buggify {
	b := &buggify{on: map[string]bool{}}
	for _, s := range buggifySites {
		if r.Float64() < 0.25 && enabled {
			b.on[s] = true
		}
	}
	return b
}

func (b *buggify) enabled(site string) bool { return b.on[site] }

// fire reports whether an enabled site fires now, drawing from r.
func (b *buggify) fire(r *rand.Rand, site string, p float64) bool {
	return b.on[site] && r.Float64() < p
}

func (b *buggify) list() []string {
	var out []string
	for s := range b.on {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[K ~string | ~int | ~uint64, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func durn(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// traceHandler is a slog.Handler that writes a simulated process's log
// lines into the trace (without wall-clock times, so traces stay
// deterministic).
type traceHandler struct {
	w      *world
	prefix string
	attrs  []slog.Attr
}

func (h *traceHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", h.prefix, r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	h.w.record("%s", b.String())
	return nil
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceHandler{w: h.w, prefix: h.prefix, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *traceHandler) WithGroup(string) slog.Handler { return h }

// logger is the logger of node n's process: into the trace.
func (s *Sim) logger(n *node) *slog.Logger {
	return slog.New(&traceHandler{w: s.w, prefix: fmt.Sprintf("n%d", n.id)})
}
