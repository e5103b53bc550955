package checker

import (
	"fmt"
	"sort"
)

// AnomalyKind names a Jepsen-style anomaly (Jepsen's Kafka test vocabulary).
type AnomalyKind string

// Anomaly kinds.
const (
	InconsistentOffset AnomalyKind = "inconsistent-offset" // one offset, two values
	Duplicate          AnomalyKind = "duplicate"           // one value at two offsets
	AbortedRead        AnomalyKind = "aborted-read"        // a definitely failed write was read
	LostWrite          AnomalyKind = "lost-write"          // acked, never read, though a fetch read its offset
	Unseen             AnomalyKind = "unseen"              // acked, missing from the final read
	NonMonotonicSend   AnomalyKind = "nonmonotonic-send"   // a client's acked offsets go backwards
	NonMonotonicPoll   AnomalyKind = "nonmonotonic-poll"   // a consumer's position goes backwards without a seek
)

// AnomalyKinds lists every kind, in report order.
var AnomalyKinds = []AnomalyKind{InconsistentOffset, Duplicate, AbortedRead, LostWrite, Unseen, NonMonotonicSend, NonMonotonicPoll}

// Anomaly is one instance of an anomaly.
type Anomaly struct {
	Kind    AnomalyKind `json:"kind"`
	Stream  string      `json:"stream"`
	Offsets []int64     `json:"offsets,omitempty"`
	Values  []string    `json:"values,omitempty"`
	Ops     []int       `json:"ops,omitempty"`
	Detail  string      `json:"detail"`
}

// FindAnomalies looks for Jepsen anomalies in an unpatched history (all streams). The final
// read is the union of the ok fetches marked Final; without one, Unseen is not computed.
// Info outcomes are never treated as failures (a timed-out write that was read is not an
// aborted read); only ok produces count as acknowledged.
func FindAnomalies(ops []Op) []Anomaly {
	byStream := map[string][]*Op{}
	for i := range ops {
		byStream[ops[i].Stream] = append(byStream[ops[i].Stream], &ops[i])
	}
	names := make([]string, 0, len(byStream))
	for s := range byStream {
		names = append(names, s)
	}
	sort.Strings(names)
	var out []Anomaly
	for _, s := range names {
		out = append(out, streamAnomalies(s, byStream[s])...)
	}
	return out
}

func streamAnomalies(stream string, ops []*Op) []Anomaly {
	var out []Anomaly
	add := func(a Anomaly) {
		a.Stream = stream
		out = append(out, a)
	}
	valuesAt := map[int64]map[string][]int{}  // offset -> value -> op ids
	offsetsOf := map[string]map[int64][]int{} // value -> offset -> op ids
	note := func(o int64, v string, id int) {
		if valuesAt[o] == nil {
			valuesAt[o] = map[string][]int{}
		}
		valuesAt[o][v] = append(valuesAt[o][v], id)
		if offsetsOf[v] == nil {
			offsetsOf[v] = map[int64][]int{}
		}
		offsetsOf[v][o] = append(offsetsOf[v][o], id)
	}
	read := map[string]int{}   // value -> id of a fetch that read it
	readAt := map[int64]bool{} // offsets some ok fetch returned
	final := map[string]bool{} // values in the final read
	hasFinal := false
	failed := map[string]int{} // value -> id of its definitely failed produce
	var acked []*Op
	for _, op := range ops {
		switch {
		case op.Kind == KindProduce && op.Outcome == OutcomeOK:
			note(op.Offset, op.Value, op.ID)
			acked = append(acked, op)
		case op.Kind == KindProduce && op.Outcome == OutcomeFail:
			failed[op.Value] = op.ID
		case op.Kind == KindFetch && op.Outcome == OutcomeOK:
			hasFinal = hasFinal || op.Final
			for _, r := range op.Records {
				note(r.Offset, r.Value, op.ID)
				readAt[r.Offset] = true
				if _, ok := read[r.Value]; !ok {
					read[r.Value] = op.ID
				}
				if op.Final {
					final[r.Value] = true
				}
			}
		}
	}

	for _, o := range sortedKeys(valuesAt) {
		if vs := valuesAt[o]; len(vs) > 1 {
			a := Anomaly{Kind: InconsistentOffset, Offsets: []int64{o}}
			for _, v := range sortedKeys(vs) {
				a.Values = append(a.Values, v)
				a.Ops = append(a.Ops, vs[v][0])
			}
			a.Detail = fmt.Sprintf("offset %d holds %d different values %q", o, len(vs), a.Values)
			add(a)
		}
	}
	for _, v := range sortedKeys(offsetsOf) {
		if os := offsetsOf[v]; len(os) > 1 {
			a := Anomaly{Kind: Duplicate, Values: []string{v}}
			for _, o := range sortedKeys(os) {
				a.Offsets = append(a.Offsets, o)
				a.Ops = append(a.Ops, os[o][0])
			}
			a.Detail = fmt.Sprintf("value %q at offsets %v", v, a.Offsets)
			add(a)
		}
	}
	for _, v := range sortedKeys(failed) {
		if f, ok := read[v]; ok {
			add(Anomaly{Kind: AbortedRead, Values: []string{v}, Ops: []int{failed[v], f},
				Detail: fmt.Sprintf("value %q of failed produce op %d was read by op %d", v, failed[v], f)})
		}
	}
	for _, p := range acked {
		_, wasRead := read[p.Value]
		// "Below the highest offset read" counts only offsets some fetch returned: consumers
		// that seek skip offsets, and an offset nobody read proves nothing. With a complete
		// final read the two definitions agree.
		if !wasRead && readAt[p.Offset] {
			add(Anomaly{Kind: LostWrite, Values: []string{p.Value}, Offsets: []int64{p.Offset}, Ops: []int{p.ID},
				Detail: fmt.Sprintf("value %q acked at offset %d, never read though that offset was read (%q)", p.Value, p.Offset, sortedKeys(valuesAt[p.Offset]))})
		}
		if hasFinal && !final[p.Value] {
			add(Anomaly{Kind: Unseen, Values: []string{p.Value}, Offsets: []int64{p.Offset}, Ops: []int{p.ID},
				Detail: fmt.Sprintf("value %q acked at offset %d, missing from the final read", p.Value, p.Offset)})
		}
	}
	for _, a := range nonMonotonicSends(acked) {
		add(a)
	}
	for _, a := range nonMonotonicPolls(ops) {
		add(a)
	}
	return out
}

// nonMonotonicSends: a client's acked produces must not go backwards, either in send order on
// one connection (the pipeline applies in order) or in real time (B invoked after A completed).
func nonMonotonicSends(acked []*Op) []Anomaly {
	var out []Anomaly
	type pair struct{ a, b int }
	seen := map[pair]bool{}
	report := func(prev, op *Op, how string) {
		if seen[pair{prev.ID, op.ID}] {
			return
		}
		seen[pair{prev.ID, op.ID}] = true
		out = append(out, Anomaly{Kind: NonMonotonicSend, Values: []string{prev.Value, op.Value},
			Offsets: []int64{prev.Offset, op.Offset}, Ops: []int{prev.ID, op.ID},
			Detail: fmt.Sprintf("client %d: op %d acked at %d after op %d acked at %d (%s)", op.Client, op.ID, op.Offset, prev.ID, prev.Offset, how)})
	}
	byConn := map[int][]*Op{}
	byClient := map[int][]*Op{}
	for _, op := range acked {
		byConn[op.Conn] = append(byConn[op.Conn], op)
		byClient[op.Client] = append(byClient[op.Client], op)
	}
	for _, c := range sortedKeys(byConn) {
		ops := byConn[c]
		sort.Slice(ops, func(i, j int) bool { return ops[i].Seq < ops[j].Seq })
		var hi *Op
		for _, op := range ops {
			if hi != nil && op.Offset < hi.Offset {
				report(hi, op, fmt.Sprintf("conn %d send order", c))
			}
			if hi == nil || op.Offset > hi.Offset {
				hi = op
			}
		}
	}
	for _, c := range sortedKeys(byClient) {
		byInvoke := append([]*Op(nil), byClient[c]...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
		byComplete := append([]*Op(nil), byClient[c]...)
		sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete < byComplete[j].Complete })
		var hi *Op // highest offset among ops completed before the current invoke
		j := 0
		for _, op := range byInvoke {
			for ; j < len(byComplete) && byComplete[j].Complete < op.Invoke; j++ {
				if hi == nil || byComplete[j].Offset > hi.Offset {
					hi = byComplete[j]
				}
			}
			if hi != nil && op.Offset < hi.Offset {
				report(hi, op, "real-time order")
			}
		}
	}
	return out
}

// nonMonotonicPolls: per connection, a consumer's next fetch starts at or after the position
// its previous fetch left it at (From + records returned), unless the fetch is a Seek.
func nonMonotonicPolls(ops []*Op) []Anomaly {
	var out []Anomaly
	byConn := map[int][]*Op{}
	for _, op := range ops {
		if op.Kind == KindFetch && op.Outcome == OutcomeOK {
			byConn[op.Conn] = append(byConn[op.Conn], op)
		}
	}
	for _, c := range sortedKeys(byConn) {
		fs := byConn[c]
		sort.Slice(fs, func(i, j int) bool { return fs[i].Seq < fs[j].Seq })
		var prev *Op
		pos := int64(-1)
		for _, f := range fs {
			if prev != nil && !f.Seek && f.From < pos {
				out = append(out, Anomaly{Kind: NonMonotonicPoll, Offsets: []int64{pos, f.From}, Ops: []int{prev.ID, f.ID},
					Detail: fmt.Sprintf("conn %d: fetch op %d from %d after op %d left the position at %d", c, f.ID, f.From, prev.ID, pos)})
			}
			prev, pos = f, f.From
			if n := len(f.Records); n > 0 {
				pos = f.Records[n-1].Offset + 1
			}
		}
	}
	return out
}

func sortedKeys[K int | int64 | string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
