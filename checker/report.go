package checker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Options configure Check.
type Options struct {
	// Timeout bounds porcupine per stream; 0 means 60s. A timeout is a failed check.
	Timeout time.Duration
	// MaxExamples bounds the examples kept per anomaly kind and for ordering; 0 means 5.
	MaxExamples int
	// OutDir, when set, receives summary.json, report.md, history.jsonl and, when anything
	// fails, porcupine's history.html.
	OutDir string
	// Faults are shown as annotations in history.html and listed in the report.
	Faults []FaultWindow
	// FinalLog gives, per stream, the final complete read (values from offset 0) when it is
	// not in the history as Final fetches. It is added as a Final fetch after the last op.
	FinalLog map[string][]string
	// Replicas / ReplicaHashes give, per stream and replica, the committed prefix for the
	// convergence check.
	Replicas      map[string]map[string][]ReplicaRecord
	ReplicaHashes map[string]map[string]ReplicaHashes
	// NoPatch skips patching of info produces and gives unknowns porcupine's raw treatment
	// (diagnosis only: many unknowns make porcupine exponential).
	NoPatch bool
	// Parallelism bounds streams checked at once; 0 means GOMAXPROCS.
	Parallelism int
}

// Result is the outcome of Check.
type Result struct {
	OK       bool               `json:"ok"`
	Ops      int                `json:"ops"`
	Streams  []*StreamResult    `json:"streams"`
	Ordering Summary[Violation] `json:"ordering"`
	// OrderingKinds counts the ordering violations by kind.
	OrderingKinds map[ViolationKind]int `json:"ordering_kinds,omitempty"`
	Errors        []string              `json:"errors,omitempty"`   // malformed history: nothing else was checked
	Warnings      []string              `json:"warnings,omitempty"` // doubts about the check's assumptions
	Millis        float64               `json:"millis"`
	HTMLPath      string                `json:"html,omitempty"`
	Faults        []FaultWindow         `json:"faults,omitempty"`
}

// Summary is a count with up to Options.MaxExamples examples.
type Summary[T any] struct {
	Count    int `json:"count"`
	Examples []T `json:"examples,omitempty"`
}

// StreamResult is the outcome of the checks of one stream.
type StreamResult struct {
	Stream  string     `json:"stream"`
	OK      bool       `json:"ok"`
	Ops     int        `json:"ops"`     // ops of this stream in the history
	Checked int        `json:"checked"` // ops given to porcupine after patching
	Patch   PatchStats `json:"patch"`
	// Porcupine is "Ok", "Illegal" or "Unknown" (timed out: a failure).
	Porcupine       string                            `json:"porcupine"`
	PorcupineMillis float64                           `json:"porcupine_ms"`
	Anomalies       map[AnomalyKind]*Summary[Anomaly] `json:"anomalies,omitempty"`
	Ordering        int                               `json:"ordering_violations"`
	Convergence     *ConvergenceResult                `json:"convergence,omitempty"`
	Failures        []string                          `json:"failures,omitempty"` // one line per failed check

	lin     linResult
	patched []Op
}

// Check runs every check on a history and, with opts.OutDir, writes the report files.
func Check(history []Op, opts Options) *Result {
	start := time.Now()
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.MaxExamples <= 0 {
		opts.MaxExamples = 5
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = runtime.GOMAXPROCS(0)
	}
	res := &Result{Ops: len(history), Faults: opts.Faults}
	ops := withFinalLog(history, opts.FinalLog)
	if errs := Validate(ops); len(errs) > 0 {
		res.Errors = errs
		res.finish(start, opts, ops)
		return res
	}

	// Linearizability and anomalies judge writes: a retried write's attempts are one.
	writes := MergeRetries(ops)
	byStream := map[string][]Op{}
	for _, op := range writes {
		byStream[op.Stream] = append(byStream[op.Stream], op)
	}
	names := sortedKeys(byStream)
	for _, s := range names {
		res.Streams = append(res.Streams, &StreamResult{Stream: s, Ops: len(byStream[s])})
	}
	res.Warnings = finalReadWarnings(byStream)

	// Patch and check linearizability per stream, a few streams at a time.
	sem := make(chan struct{}, opts.Parallelism)
	var wg sync.WaitGroup
	for _, sr := range res.Streams {
		wg.Add(1)
		sem <- struct{}{}
		go func(sr *StreamResult) {
			defer func() { <-sem; wg.Done() }()
			sr.patched, sr.Patch = patch(byStream[sr.Stream], !opts.NoPatch)
			sr.Checked = len(sr.patched)
			sr.lin = checkLinearizable(sr.patched, opts.Timeout, !opts.NoPatch)
			sr.Porcupine = string(sr.lin.result)
			sr.PorcupineMillis = millis(sr.lin.duration)
			switch sr.lin.result {
			case porcupine.Illegal:
				sr.Failures = append(sr.Failures, "not linearizable (porcupine Illegal)")
			case porcupine.Unknown:
				sr.Failures = append(sr.Failures, fmt.Sprintf("porcupine timed out after %s: counted as a failure", opts.Timeout))
			}
		}(sr)
	}
	wg.Wait()

	// Ordering: over the whole history, every attempt on its connection, with patched
	// produces substituted (not for retried writes: which attempt landed is unknown).
	patchedByID := map[int]Op{}
	for _, sr := range res.Streams {
		for _, op := range sr.patched {
			if op.Patched && !op.Retry {
				patchedByID[op.ID] = op
			}
		}
	}
	effective := make([]Op, len(ops))
	for i, op := range ops {
		if p, ok := patchedByID[op.ID]; ok {
			op = p
		}
		effective[i] = op
	}
	violations := CheckOrdering(effective)
	res.Ordering = summarize(violations, opts.MaxExamples)
	streamIdx := map[string]*StreamResult{}
	for _, sr := range res.Streams {
		streamIdx[sr.Stream] = sr
	}
	for _, v := range violations {
		if sr := streamIdx[v.Stream]; sr != nil {
			sr.Ordering++
		}
		if res.OrderingKinds == nil {
			res.OrderingKinds = map[ViolationKind]int{}
		}
		res.OrderingKinds[v.Kind]++
	}

	anomalies := FindAnomalies(writes)
	for _, a := range anomalies {
		sr := streamIdx[a.Stream]
		if sr.Anomalies == nil {
			sr.Anomalies = map[AnomalyKind]*Summary[Anomaly]{}
		}
		s := sr.Anomalies[a.Kind]
		if s == nil {
			s = &Summary[Anomaly]{}
			sr.Anomalies[a.Kind] = s
		}
		s.Count++
		if len(s.Examples) < opts.MaxExamples {
			s.Examples = append(s.Examples, a)
		}
	}
	for _, sr := range res.Streams {
		for _, k := range AnomalyKinds {
			if s := sr.Anomalies[k]; s != nil {
				sr.Failures = append(sr.Failures, fmt.Sprintf("%d %s", s.Count, k))
			}
		}
		if sr.Ordering > 0 {
			sr.Failures = append(sr.Failures, fmt.Sprintf("%d same-connection ordering violations", sr.Ordering))
		}
	}

	// Convergence, for streams the caller gave replica logs for.
	for s, reps := range opts.Replicas {
		c := CheckConvergence(reps)
		res.stream(s).Convergence = &c
	}
	for s, reps := range opts.ReplicaHashes {
		c := CheckConvergenceHashes(reps)
		res.stream(s).Convergence = &c
	}
	for _, sr := range res.Streams {
		if c := sr.Convergence; c != nil && !c.OK {
			sr.Failures = append(sr.Failures, fmt.Sprintf("replicas diverge at offset %d: %v %v", c.FirstDiff, c.Groups, c.Errors))
		}
		sr.OK = len(sr.Failures) == 0
	}

	res.OK = res.Ordering.Count == 0
	for _, sr := range res.Streams {
		res.OK = res.OK && sr.OK
	}
	if !res.OK && opts.OutDir != "" {
		if err := res.writeHTML(opts, ops, anomalies, violations); err != nil {
			res.Warnings = append(res.Warnings, "history.html: "+err.Error())
		}
	}
	res.finish(start, opts, ops)
	return res
}

// stream returns the result of stream s, adding one for a stream seen only by replicas.
func (r *Result) stream(s string) *StreamResult {
	for _, sr := range r.Streams {
		if sr.Stream == s {
			return sr
		}
	}
	sr := &StreamResult{Stream: s, Porcupine: string(porcupine.Ok)}
	r.Streams = append(r.Streams, sr)
	sort.Slice(r.Streams, func(i, j int) bool { return r.Streams[i].Stream < r.Streams[j].Stream })
	return sr
}

func (r *Result) finish(start time.Time, opts Options, ops []Op) {
	if len(r.Errors) > 0 {
		r.OK = false
	}
	r.Millis = millis(time.Since(start))
	if opts.OutDir == "" {
		return
	}
	if err := r.writeFiles(opts.OutDir, ops); err != nil {
		r.Warnings = append(r.Warnings, "report files: "+err.Error())
	}
}

func (r *Result) writeFiles(dir string, ops []Op) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return err
	}
	if err := Save(f, ops); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	js, err := r.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), js, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644)
}

// writeHTML writes history.html for the failing streams: their own porcupine run when one
// stream failed, otherwise one combined run (partitioned by stream) so all are in one file.
func (r *Result) writeHTML(opts Options, ops []Op, anomalies []Anomaly, violations []Violation) error {
	var failing []*StreamResult
	var combined []Op
	for _, sr := range r.Streams {
		if !sr.OK && sr.lin.model.Step != nil {
			failing = append(failing, sr)
			combined = append(combined, sr.patched...)
		}
	}
	if len(failing) == 0 { // ordering only: show everything
		for _, sr := range r.Streams {
			if sr.lin.model.Step != nil {
				failing = append(failing, sr)
				combined = append(combined, sr.patched...)
			}
		}
	}
	if len(failing) == 0 {
		return nil
	}
	lr := failing[0].lin
	if len(failing) > 1 {
		lr = checkLinearizable(combined, opts.Timeout, !opts.NoPatch)
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return err
	}
	byID := map[int]*Op{}
	for i := range ops {
		byID[ops[i].ID] = &ops[i]
	}
	var notes []porcupine.Annotation
	note := func(tag, desc string, ids []int) {
		for _, id := range ids {
			if op := byID[id]; op != nil {
				notes = append(notes, porcupine.Annotation{Tag: tag, Start: op.Complete, Description: desc,
					Details: fmt.Sprintf("op %d", id), BackgroundColor: "#fff2b3"})
			}
		}
	}
	for i, a := range anomalies {
		if i < 50 {
			note("anomaly", string(a.Kind)+": "+a.Detail, a.Ops[len(a.Ops)-1:])
		}
	}
	for i, v := range violations {
		if i < 50 {
			note("ordering", string(v.Kind)+": "+v.Detail, v.Ops[len(v.Ops)-1:])
		}
	}
	path := filepath.Join(opts.OutDir, "history.html")
	if err := visualize(path, lr, opts.Faults, notes); err != nil {
		return err
	}
	r.HTMLPath = path
	return nil
}

// JSON is the machine-readable summary.
func (r *Result) JSON() ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}

// Markdown is a short human report.
func (r *Result) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# Consistency check: %s\n\n", verdict)
	fmt.Fprintf(&b, "%d ops, %d streams, checked in %.1f ms.\n\n", r.Ops, len(r.Streams), r.Millis)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "- malformed history: %s\n", e)
	}
	if len(r.Streams) > 0 {
		b.WriteString("| stream | result | ops | checked | patched | dropped | unknown | porcupine | ms | failures |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.Streams {
			res := "ok"
			if !s.OK {
				res = "**FAIL**"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %s | %.1f | %s |\n", s.Stream, res, s.Ops, s.Checked,
				s.Patch.Patched, s.Patch.DroppedProduces+s.Patch.DroppedFetches, s.Patch.Unknown, s.Porcupine,
				s.PorcupineMillis, strings.Join(s.Failures, "; "))
		}
		b.WriteString("\n")
	}
	for _, s := range r.Streams {
		for _, k := range AnomalyKinds {
			a := s.Anomalies[k]
			if a == nil {
				continue
			}
			fmt.Fprintf(&b, "### %s: %s (%d)\n\n", s.Stream, k, a.Count)
			for _, e := range a.Examples {
				fmt.Fprintf(&b, "- %s (ops %v)\n", e.Detail, e.Ops)
			}
			b.WriteString("\n")
		}
		if c := s.Convergence; c != nil && !c.OK {
			fmt.Fprintf(&b, "### %s: replicas diverge\n\nfirst differing offset %d, groups %v %v\n\n", s.Stream, c.FirstDiff, c.Groups, c.Errors)
		}
	}
	if r.Ordering.Count > 0 {
		fmt.Fprintf(&b, "### Same-connection ordering (%d)\n\n", r.Ordering.Count)
		for _, v := range r.Ordering.Examples {
			fmt.Fprintf(&b, "- %s conn %d: %s (ops %v)\n", v.Kind, v.Conn, v.Detail, v.Ops)
		}
		b.WriteString("\n")
	}
	if len(r.Faults) > 0 {
		b.WriteString("### Fault windows\n\n")
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "- %s [%d, %d] %s\n", f.Kind, f.Start, f.End, f.Detail)
		}
		b.WriteString("\n")
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "- warning: %s\n", w)
	}
	if r.HTMLPath != "" {
		fmt.Fprintf(&b, "\nLinearizability visualization: %s\n", r.HTMLPath)
	}
	return b.String()
}

func summarize[T any](xs []T, n int) Summary[T] {
	s := Summary[T]{Count: len(xs)}
	if len(xs) > n {
		xs = xs[:n]
	}
	s.Examples = append(s.Examples, xs...)
	return s
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// withFinalLog appends, per stream of finalLog, a Final fetch from 0 of those values, invoked
// after the last op. It reports no HWM: the caller vouches that it is complete.
func withFinalLog(history []Op, finalLog map[string][]string) []Op {
	if len(finalLog) == 0 {
		return history
	}
	ops := append([]Op(nil), history...)
	var end int64
	nextID, conn := 0, -1
	for _, op := range history {
		end = max(end, op.Complete, op.Invoke)
		nextID = max(nextID, op.ID+1)
		conn = min(conn, op.Conn-1)
	}
	for i, s := range sortedKeys(finalLog) {
		f := Op{ID: nextID + i, Stream: s, Client: -1, Conn: conn - i, Seq: 1, Kind: KindFetch,
			Invoke: end + 1, Complete: end + 2, Outcome: OutcomeOK, HighWatermark: -1, Final: true, Seek: true}
		for o, v := range finalLog[s] {
			f.Records = append(f.Records, Record{Offset: int64(o), Value: v})
		}
		ops = append(ops, f)
	}
	return ops
}

// finalReadWarnings flags final reads that overlap the workload or failed: Unseen assumes
// the final read began after every acknowledgement.
func finalReadWarnings(byStream map[string][]Op) []string {
	var ws []string
	for _, s := range sortedKeys(byStream) {
		var lastOther int64 = -1 << 63
		finalStart := int64(1<<63 - 1)
		for _, op := range byStream[s] {
			if op.Final {
				finalStart = min(finalStart, op.Invoke)
				if op.Outcome != OutcomeOK {
					ws = append(ws, fmt.Sprintf("stream %s: final read op %d is %s", s, op.ID, op.Outcome))
				}
			} else if op.Outcome != OutcomeInfo {
				lastOther = max(lastOther, op.Complete)
			}
		}
		if finalStart != int64(1<<63-1) && finalStart < lastOther {
			ws = append(ws, fmt.Sprintf("stream %s: final read starts at %d, before the workload's last completion at %d", s, finalStart, lastOther))
		}
	}
	return ws
}
