package checker

import (
	"fmt"
	"sort"
)

// ViolationKind names a same-connection ordering guarantee.
type ViolationKind string

// Same-connection guarantees of VDL's Kafka pipeline.
const (
	// Responses come back in the order requests were sent (Kafka's per-connection rule).
	ResponseOrder ViolationKind = "response-order"
	// Acknowledged produces to one stream on one connection get strictly increasing offsets
	// in send order (requests are applied in order).
	ProduceOrder ViolationKind = "produce-offset-order"
	// After a produce failed (answered with an error code, whatever its outcome), the
	// server fails every later request on that connection, so a pipelined write cannot
	// land after a hole.
	OKAfterFailure ViolationKind = "ok-after-failed-produce"
)

// Violation is one broken same-connection guarantee.
type Violation struct {
	Kind   ViolationKind `json:"kind"`
	Conn   int           `json:"conn"`
	Stream string        `json:"stream,omitempty"`
	Ops    []int         `json:"ops"`
	Detail string        `json:"detail"`
}

// CheckOrdering checks the same-connection guarantees; linear after sorting each
// connection's ops by Seq. Pass the history after patching (Patch's Patched ops replacing
// their originals, failed and info ops kept): a patched produce is known to have happened.
//
//   - Response order: with RespSeq, responses must arrive in Seq order. Without it, Complete
//     times of ok and fail ops must be non-decreasing in Seq order; info ops are skipped
//     since their Complete may be a client-side deadline, not a response.
//   - Produce order: only originally ok produces (a patched offset comes from a fetch, not
//     from the connection's response).
//   - After a failed produce (definitely failed, or answered with an error code such as
//     NOT_LEADER or REQUEST_TIMED_OUT even though its outcome is unknown) no later request
//     on the connection may be answered with success. After a produce that definitely
//     failed, no later produce on the connection may land either (observed: patched): the
//     write would follow a hole. (After an unknown outcome a later write may land: the
//     earlier one may have landed too.)
func CheckOrdering(ops []Op) []Violation {
	byConn := map[int][]*Op{}
	for i := range ops {
		byConn[ops[i].Conn] = append(byConn[ops[i].Conn], &ops[i])
	}
	conns := make([]int, 0, len(byConn))
	for c := range byConn {
		conns = append(conns, c)
	}
	sort.Ints(conns)
	var vs []Violation
	for _, c := range conns {
		cops := byConn[c]
		sort.SliceStable(cops, func(i, j int) bool { return cops[i].Seq < cops[j].Seq })
		vs = append(vs, responseOrder(c, cops)...)
		vs = append(vs, produceOrder(c, cops)...)
		vs = append(vs, okAfterFailure(c, cops)...)
	}
	return vs
}

func responseOrder(conn int, ops []*Op) []Violation {
	var vs []Violation
	explicit := false
	for _, op := range ops {
		explicit = explicit || op.RespSeq > 0
	}
	var prev *Op // the earlier-sent op that was answered latest so far
	for _, op := range ops {
		if explicit {
			if op.RespSeq <= 0 {
				continue
			}
			if prev != nil && op.RespSeq < prev.RespSeq {
				vs = append(vs, Violation{Kind: ResponseOrder, Conn: conn, Ops: []int{prev.ID, op.ID},
					Detail: fmt.Sprintf("seq %d answered as response #%d, after seq %d (response #%d)", op.Seq, op.RespSeq, prev.Seq, prev.RespSeq)})
			}
			if prev == nil || op.RespSeq > prev.RespSeq {
				prev = op
			}
			continue
		}
		if op.Outcome == OutcomeInfo || op.Patched {
			continue
		}
		if prev != nil && op.Complete < prev.Complete {
			vs = append(vs, Violation{Kind: ResponseOrder, Conn: conn, Ops: []int{prev.ID, op.ID},
				Detail: fmt.Sprintf("seq %d completed at %d, before seq %d completed at %d", op.Seq, op.Complete, prev.Seq, prev.Complete)})
		}
		if prev == nil || op.Complete > prev.Complete {
			prev = op
		}
	}
	return vs
}

func produceOrder(conn int, ops []*Op) []Violation {
	var vs []Violation
	last := map[string]*Op{} // stream -> acked produce with the highest offset so far
	for _, op := range ops {
		if op.Kind != KindProduce || op.Outcome != OutcomeOK || op.Patched {
			continue
		}
		if p := last[op.Stream]; p != nil && op.Offset <= p.Offset {
			vs = append(vs, Violation{Kind: ProduceOrder, Conn: conn, Stream: op.Stream, Ops: []int{p.ID, op.ID},
				Detail: fmt.Sprintf("seq %d acked at offset %d, not after seq %d at offset %d", op.Seq, op.Offset, p.Seq, p.Offset)})
		}
		if p := last[op.Stream]; p == nil || op.Offset > p.Offset {
			last[op.Stream] = op
		}
	}
	return vs
}

func okAfterFailure(conn int, ops []*Op) []Violation {
	var vs []Violation
	var poisoned, failed *Op // first produce answered with an error; first one that definitely failed
	for _, op := range ops {
		switch {
		case poisoned != nil && op.Outcome == OutcomeOK && !op.Patched:
			vs = append(vs, Violation{Kind: OKAfterFailure, Conn: conn, Stream: op.Stream, Ops: []int{poisoned.ID, op.ID},
				Detail: fmt.Sprintf("seq %d %s succeeded after produce seq %d failed (%s)", op.Seq, op.Kind, poisoned.Seq, poisoned.Err)})
		case failed != nil && op.Kind == KindProduce && op.Patched:
			vs = append(vs, Violation{Kind: OKAfterFailure, Conn: conn, Stream: op.Stream, Ops: []int{failed.ID, op.ID},
				Detail: fmt.Sprintf("seq %d produce was observed (info, patched) after produce seq %d definitely failed (%s): a write landed after a hole", op.Seq, failed.Seq, failed.Err)})
		}
		if op.Kind != KindProduce {
			continue
		}
		if poisoned == nil && (op.Outcome == OutcomeFail || op.ErrCode != 0) {
			poisoned = op
		}
		if failed == nil && op.Outcome == OutcomeFail {
			failed = op
		}
	}
	return vs
}
