// Package checker checks Kafka-level histories of VDL log streams: linearizability of each
// stream (porcupine), same-connection ordering, Jepsen-style anomalies and replica
// convergence. The deterministic simulator and the real-process campaigns share it, and a
// saved history (JSON lines) can be re-checked offline.
package checker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// Kind is the request type of an Op.
type Kind string

// Op kinds.
const (
	KindProduce Kind = "produce"
	KindFetch   Kind = "fetch"
)

// Outcome is what the client knows about an Op.
type Outcome string

// Outcomes. Timeouts, disconnects and NOT_LEADER are Info, never Fail: classifying them as
// Fail would turn a write that did land into a false "aborted read".
const (
	OutcomeOK   Outcome = "ok"   // the server answered success
	OutcomeFail Outcome = "fail" // definitely did not happen
	OutcomeInfo Outcome = "info" // unknown: it may or may not have taken effect
)

// Record is one record returned by a fetch.
type Record struct {
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

// Op is one Kafka request and its outcome, as a client saw it.
//
// Conn identifies one TCP (or simulated) connection and must be unique in the history: a
// reconnect gets a new Conn. Seq is the order in which requests were sent on that connection
// (the correlation id order). Times are nanoseconds of one monotonic or simulated clock.
type Op struct {
	ID     int    `json:"id"`
	Stream string `json:"stream"`
	Client int    `json:"client"`
	Conn   int    `json:"conn"`
	Seq    int64  `json:"seq"`
	// RespSeq, when > 0, is the 1-based position of this op's response among the responses
	// read on its connection. Real clients should set it from the connection's reader: their
	// completion timestamps are taken on racing goroutines and may not reflect arrival order.
	// When 0, response order is judged by Complete times of ok/fail ops.
	RespSeq  int64   `json:"resp_seq,omitempty"`
	Kind     Kind    `json:"kind"`
	Invoke   int64   `json:"invoke"`
	Complete int64   `json:"complete"`
	Outcome  Outcome `json:"outcome"`
	Err      string  `json:"err,omitempty"`
	// ErrCode is the Kafka error code the response carried (0: none, or
	// no response). A produce answered with one poisons its connection,
	// whether the outcome is fail or info (OKAfterFailure).
	ErrCode int16 `json:"err_code,omitempty"`

	// Produce: Value is unique per stream; Offset is the acknowledged offset (when ok).
	Value  string `json:"value,omitempty"`
	Offset int64  `json:"offset"`
	// Retry marks a produce that sends again the value of an earlier produce of the same
	// client (an idempotent producer resending a write it has no answer for, with the same
	// sequence number): the attempts are one write, which must land at most once. The
	// same-connection checks see every attempt; the others see the write (MergeRetries).
	Retry bool `json:"retry,omitempty"`

	// Fetch: records from From on (clients drop records before From, so every recorded
	// offset is >= From), and the reported high watermark, -1 if not reported.
	From          int64    `json:"from,omitempty"`
	Records       []Record `json:"records,omitempty"`
	HighWatermark int64    `json:"hwm"`
	// Seek marks a fetch whose From was set explicitly (not the consumer's next position), so
	// going backwards is intended.
	Seek bool `json:"seek,omitempty"`
	// Final marks the fetches of the final complete read: run after the workload stopped and
	// the cluster healed, reading the stream from 0 to its end. Acked writes it misses are
	// Unseen; and since it observes every offset, patching can drop every unknown write it
	// did not see.
	Final bool `json:"final,omitempty"`
	// Patched is set by Patch on an info produce that a fetch observed.
	Patched bool `json:"patched,omitempty"`
}

// Save writes ops as JSON lines, one op per line.
func Save(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw) // Encode appends '\n'
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Load reads JSON lines written by Save. Blank lines are skipped; lines may be of any length.
func Load(r io.Reader) ([]Op, error) {
	br := bufio.NewReader(r)
	var ops []Op
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			var op Op
			if jerr := json.Unmarshal(b, &op); jerr != nil {
				return ops, fmt.Errorf("history line %d: %w", line, jerr)
			}
			ops = append(ops, op)
		}
		if errors.Is(err, io.EOF) {
			return ops, nil
		}
		if err != nil {
			return ops, err
		}
	}
}

// Validate reports malformed ops. Checks assume a valid history: unique ids, unique
// (Conn, Seq), unique produce values per stream (patching identifies writes by value).
func Validate(ops []Op) []string {
	var errs []string
	add := func(op *Op, format string, args ...any) {
		if len(errs) < 100 {
			errs = append(errs, fmt.Sprintf("op %d: ", op.ID)+fmt.Sprintf(format, args...))
		}
	}
	ids := make(map[int]bool, len(ops))
	type connSeq struct {
		conn int
		seq  int64
	}
	seqs := make(map[connSeq]int, len(ops))
	type streamValue struct{ stream, value string }
	values := make(map[streamValue]int)
	clients := map[int]int{} // first produce of a value -> its client
	for i := range ops {
		op := &ops[i]
		if ids[op.ID] {
			add(op, "duplicate id")
		}
		ids[op.ID] = true
		if prev, ok := seqs[connSeq{op.Conn, op.Seq}]; ok {
			add(op, "same conn %d and seq %d as op %d", op.Conn, op.Seq, prev)
		}
		seqs[connSeq{op.Conn, op.Seq}] = op.ID
		if op.Complete < op.Invoke {
			add(op, "complete %d before invoke %d", op.Complete, op.Invoke)
		}
		switch op.Outcome {
		case OutcomeOK, OutcomeFail, OutcomeInfo:
		default:
			add(op, "unknown outcome %q", op.Outcome)
		}
		switch op.Kind {
		case KindProduce:
			if op.Value == "" {
				add(op, "produce without value")
			}
			k := streamValue{op.Stream, op.Value}
			prev, ok := values[k]
			if ok && !op.Retry {
				add(op, "value %q already produced by op %d", op.Value, prev)
			} else if ok && clients[prev] != op.Client {
				add(op, "value %q retried by client %d, produced by client %d (op %d)", op.Value, op.Client, clients[prev], prev)
			} else if !ok && op.Retry {
				add(op, "retry of value %q, never produced before", op.Value)
			}
			if !ok {
				values[k] = op.ID
				clients[op.ID] = op.Client
			}
			if op.Outcome == OutcomeOK && op.Offset < 0 {
				add(op, "ok produce with offset %d", op.Offset)
			}
		case KindFetch:
			if op.From < 0 || op.HighWatermark < -1 {
				add(op, "fetch from %d hwm %d", op.From, op.HighWatermark)
			}
		default:
			add(op, "unknown kind %q", op.Kind)
		}
	}
	return errs
}

// Recorder collects a history from concurrent real clients. Invoke before sending a request,
// complete the returned Handle when the outcome is known. Safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	now   func() int64
	ops   []*Op
	seqs  map[int]int64
	resps map[int]int64
}

// NewRecorder returns a Recorder using clock for timestamps; nil means a monotonic clock
// (nanoseconds since NewRecorder).
func NewRecorder(clock func() int64) *Recorder {
	if clock == nil {
		start := time.Now()
		clock = func() int64 { return int64(time.Since(start)) }
	}
	return &Recorder{now: clock, seqs: map[int]int64{}, resps: map[int]int64{}}
}

// Handle is an invoked op waiting for its outcome.
type Handle struct {
	r  *Recorder
	op *Op
}

// Invoke records the start of op (Kind, Stream, Client, Conn and Value or From set by the
// caller). The id and invoke time are assigned; Seq 0 assigns the next sequence number of
// op.Conn, which is right when Invoke is called in send order (under the connection's lock).
func (r *Recorder) Invoke(op Op) *Handle {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.ID = len(r.ops)
	op.Invoke = r.now()
	op.Complete = op.Invoke
	op.Outcome = OutcomeInfo // until completed
	op.HighWatermark = -1
	if op.Seq == 0 {
		r.seqs[op.Conn]++
		op.Seq = r.seqs[op.Conn]
	} else if op.Seq > r.seqs[op.Conn] {
		r.seqs[op.Conn] = op.Seq
	}
	p := &op
	r.ops = append(r.ops, p)
	return &Handle{r: r, op: p}
}

// Completion is the outcome of an op. Responded says a response was read from the
// connection: the Recorder then assigns RespSeq in the order of Complete calls, so call it
// from the connection's reader.
type Completion struct {
	Outcome       Outcome
	Err           string
	ErrCode       int16
	Offset        int64
	Records       []Record
	HighWatermark int64
	Responded     bool
}

// Complete records the outcome; the complete time is taken now.
func (h *Handle) Complete(c Completion) {
	r := h.r
	r.mu.Lock()
	defer r.mu.Unlock()
	op := h.op
	op.Complete = r.now()
	op.Outcome, op.Err, op.ErrCode = c.Outcome, c.Err, c.ErrCode
	op.Offset = c.Offset
	op.Records = append([]Record(nil), c.Records...)
	op.HighWatermark = c.HighWatermark
	if c.Responded {
		r.resps[op.Conn]++
		op.RespSeq = r.resps[op.Conn]
	}
}

// ProduceOK records an acknowledged produce read from the connection.
func (h *Handle) ProduceOK(offset int64) {
	h.Complete(Completion{Outcome: OutcomeOK, Offset: offset, HighWatermark: -1, Responded: true})
}

// FetchOK records a successful fetch read from the connection; hwm -1 if not reported.
func (h *Handle) FetchOK(records []Record, hwm int64) {
	h.Complete(Completion{Outcome: OutcomeOK, Records: records, HighWatermark: hwm, Responded: true})
}

// Fail records a definite failure answered by the server.
func (h *Handle) Fail(err string) {
	h.Complete(Completion{Outcome: OutcomeFail, Err: err, HighWatermark: -1, Responded: true})
}

// Error records a response carrying Kafka error code: a definite failure
// (definite: the request was refused before anything was written) or an
// unknown outcome (NOT_LEADER, REQUEST_TIMED_OUT: it may have been written).
func (h *Handle) Error(code int16, definite bool) {
	o := OutcomeInfo
	if definite {
		o = OutcomeFail
	}
	h.Complete(Completion{Outcome: o, Err: fmt.Sprintf("error %d", code), ErrCode: code, HighWatermark: -1, Responded: true})
}

// Info records an unknown outcome; responded says whether it came as a response (NOT_LEADER)
// rather than a timeout or disconnect.
func (h *Handle) Info(err string, responded bool) {
	h.Complete(Completion{Outcome: OutcomeInfo, Err: err, HighWatermark: -1, Responded: responded})
}

// History returns a copy of the recorded ops, sorted by id. Ops not yet completed are info
// (their outcome is unknown).
func (r *Recorder) History() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, len(r.ops))
	for i, p := range r.ops {
		out[i] = *p
		out[i].Records = append([]Record(nil), p.Records...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Scan calls f with the ops from index from on, in invoke order, under the recorder's lock
// (f must neither keep op nor call the recorder), and returns the number of ops recorded.
// A long run's progress report reads new and still open ops this way instead of copying
// the whole history.
func (r *Recorder) Scan(from int, f func(i int, op *Op)) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := max(from, 0); i < len(r.ops); i++ {
		f(i, r.ops[i])
	}
	return len(r.ops)
}

// MergeRetries returns the history with each retried write (produces of one value, the
// later ones marked Retry) as one produce: the first attempt's id, connection and invoke;
// ok if an attempt was acknowledged (the first acknowledgement's offset and completion),
// else unknown if an attempt was (it may have landed), else failed. A write that landed
// twice (two attempts acknowledged at different offsets, or its value read at two offsets)
// is a Duplicate anomaly of the merged history, found through the reads.
func MergeRetries(ops []Op) []Op {
	type streamValue struct{ stream, value string }
	first := map[streamValue]int{} // index in out
	out := make([]Op, 0, len(ops))
	for _, op := range ops {
		if op.Kind != KindProduce {
			out = append(out, op)
			continue
		}
		k := streamValue{op.Stream, op.Value}
		i, seen := first[k]
		if !seen || !op.Retry {
			first[k] = len(out)
			out = append(out, op)
			continue
		}
		w := &out[i]
		switch {
		case w.Outcome == OutcomeOK:
		case op.Outcome == OutcomeOK:
			w.Outcome, w.Offset, w.Complete, w.Err, w.ErrCode, w.RespSeq = OutcomeOK, op.Offset, op.Complete, "", 0, 0
		case op.Outcome == OutcomeInfo || w.Outcome == OutcomeInfo:
			w.Outcome, w.Complete = OutcomeInfo, max(w.Complete, op.Complete)
		default: // every attempt failed definitely
			w.Complete = max(w.Complete, op.Complete)
		}
		w.Retry = true // merged: its attempts are in the unmerged history
	}
	return out
}
