package checker

import (
	"sort"
)

// PatchStats counts what Patch did to one stream's history.
type PatchStats struct {
	Patched         int `json:"patched"`          // info produces observed by a fetch, now ok
	DroppedProduces int `json:"dropped_produces"` // info produces nobody saw that cannot fill a free slot
	DroppedFetches  int `json:"dropped_fetches"`  // info fetches: no result to check
	ExcludedFailed  int `json:"excluded_failed"`  // fail ops: definitely no effect, nothing observed
	Unknown         int `json:"unknown"`          // info produces left unknown (may fill a free slot)
}

// Patch prepares one stream's history for the linearizability check and returns the ops to
// check: ok ops, patched produces and the info produces that stay unknown.
//
// What it does, and why each step neither hides a violation nor invents one. Call H the
// history where an info produce may take effect at any time after its invoke (return = ∞)
// or never, and H' the patched one. "Hides nothing" means every linearization of H' is one
// of H; "invents nothing" means a linearizable H gives a linearizable H'.
//
//   - Fail ops are removed: a definitely failed request has no effect and observed nothing.
//     (If one did take effect, the anomaly check reports an aborted read, and the model
//     rejects the read: no remaining produce can put that value at that offset.)
//   - Info fetches are removed: with no result they can linearize anywhere without effect.
//   - An info produce whose value v some ok fetch saw (lowest offset o if several) becomes
//     ok at offset o with Complete = max(Invoke, ub(o)), where ub(o) is the earliest
//     Complete of an ok op proving that the log had more than o entries: an ok fetch
//     returning a record at offset >= o or reporting HWM > o, or an ok produce acknowledged
//     at offset >= o. Its own Complete (when the client gave up) is NOT a bound: a timed-out
//     write may still be applied later.
//     Hides nothing: H' narrows H's interval [invoke, ∞] and picks "took effect".
//     Invents nothing: values are unique per stream, so in any linearization of H only this
//     produce can have put v at o; it did so before every op that saw the log longer than
//     o, i.e. before ub(o).
//   - An info produce nobody saw is dropped when it cannot fill a free slot: an offset below
//     L (the longest log any ok op observed) that no ok op claims or returned. If it took
//     effect at o < L, o is not free (someone observed o and saw another value — it was not
//     there) unless o is free and its invoke <= ub(o); if at o >= L, nobody observed it and
//     it can be moved after every other op. Either way "it did not happen" fits H, so
//     dropping invents nothing, and it hides nothing (not happening is allowed for info).
//     With a complete final read there is no free slot, so every write it misses is
//     dropped. Kept unknowns can only fill free slots or go last (see newModel).
//
// ops must all belong to one stream. Input ops are not modified.
func Patch(ops []Op) ([]Op, PatchStats) {
	return patch(ops, true)
}

func patch(ops []Op, enabled bool) ([]Op, PatchStats) {
	var st PatchStats
	seen := map[string]int64{}   // value -> lowest offset where an ok fetch saw it
	observed := map[int64]bool{} // offsets an ok op claims or returned
	var longest int64            // L: the longest log an ok op observed
	type proof struct{ off, t int64 }
	var proofs []proof
	for i := range ops {
		op := &ops[i]
		if op.Outcome != OutcomeOK {
			continue
		}
		switch op.Kind {
		case KindProduce:
			proofs = append(proofs, proof{op.Offset, op.Complete})
			observed[op.Offset] = true
			longest = max(longest, op.Offset+1)
		case KindFetch:
			hi := op.HighWatermark - 1
			for _, r := range op.Records {
				if o, ok := seen[r.Value]; !ok || r.Offset < o {
					seen[r.Value] = r.Offset
				}
				observed[r.Offset] = true
				hi = max(hi, r.Offset)
			}
			if hi >= 0 {
				proofs = append(proofs, proof{hi, op.Complete})
			}
			longest = max(longest, hi+1)
		}
	}
	// ub(o) = min t over proofs with off >= o: sort by offset, suffix minimum. ub is
	// non-decreasing in o.
	sort.Slice(proofs, func(i, j int) bool { return proofs[i].off < proofs[j].off })
	for i := len(proofs) - 2; i >= 0; i-- {
		proofs[i].t = min(proofs[i].t, proofs[i+1].t)
	}
	ub := func(o int64) int64 {
		i := sort.Search(len(proofs), func(i int) bool { return proofs[i].off >= o })
		return proofs[i].t // o < L, so some proof has off >= o
	}
	lastFree := int64(-1)
	for o := longest - 1; o >= 0; o-- {
		if !observed[o] {
			lastFree = o
			break
		}
	}
	canFill := func(op *Op) bool { return lastFree >= 0 && op.Invoke <= ub(lastFree) }

	out := make([]Op, 0, len(ops))
	for _, op := range ops {
		switch {
		case op.Outcome == OutcomeFail:
			st.ExcludedFailed++
			continue
		case op.Outcome == OutcomeInfo && op.Kind == KindFetch:
			st.DroppedFetches++
			continue
		case op.Outcome == OutcomeInfo && op.Kind == KindProduce && enabled:
			if o, ok := seen[op.Value]; ok {
				op.Outcome, op.Offset, op.Patched = OutcomeOK, o, true
				op.Complete = max(op.Invoke, ub(o))
				st.Patched++
			} else if !canFill(&op) {
				st.DroppedProduces++
				continue
			} else {
				st.Unknown++
			}
		case op.Outcome == OutcomeInfo:
			st.Unknown++
		}
		op.Records = append([]Record(nil), op.Records...)
		out = append(out, op)
	}
	return out, st
}
