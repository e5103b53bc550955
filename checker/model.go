package checker

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// FaultWindow is a fault the nemesis injected during [Start, End] (same clock as the
// history), shown as an annotation in history.html.
type FaultWindow struct {
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Kind   string `json:"kind"`
	Detail string `json:"detail,omitempty"`
}

// logState is the model state: the log, as its length and a rolling hash of its values (the
// hash is shown in history.html; see Equal in newModel). A value type: a step never mutates a
// state.
type logState struct {
	Len  int64
	Done int // definite (non-unknown) ops linearized so far
	Unk  int // unknown produces linearized so far
	Hash uint64
}

func roll(h uint64, value string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(value))
	return (h ^ f.Sum64()) * 0x100000001b3
}

// streamIndex is the offset→value map of everything the checked ops claim or observed for
// one stream (ok produces' offsets, ok fetches' records). The model uses it to check content
// without carrying the log in its state.
//
// Why that is sound. A step requires every write appended at offset o to carry index[o]
// (when defined), and every fetch record at o to equal index[o]; an offset claimed with two
// values is poisoned (nothing may be appended there, no fetch may return it).
// No false alarm: in a correct run every observation is true, so the real log agrees with
// the index and its linearization passes. Nothing hidden: given a linearization the model
// accepts, the log "value at o = the write appended at o" makes every fetch return exactly
// its records (each equals index[o] = that write's value) and every HWM equal the length,
// so the history is linearizable for the real log specification.
type streamIndex struct {
	vals     map[int64]string
	conflict map[int64]bool
	longest  int64 // L: the longest log an op observed
	definite int   // ops that are not unknown produces
}

func buildIndex(ops []Op) *streamIndex {
	ix := &streamIndex{vals: map[int64]string{}, conflict: map[int64]bool{}}
	put := func(o int64, v string) {
		if old, ok := ix.vals[o]; ok && old != v {
			ix.conflict[o] = true
		}
		ix.vals[o] = v
	}
	for i := range ops {
		op := &ops[i]
		if op.Outcome != OutcomeOK {
			continue
		}
		ix.definite++
		if op.Kind == KindProduce {
			put(op.Offset, op.Value)
			ix.longest = max(ix.longest, op.Offset+1)
		}
		for _, r := range op.Records {
			put(r.Offset, r.Value)
			ix.longest = max(ix.longest, r.Offset+1)
		}
		if op.Kind == KindFetch {
			ix.longest = max(ix.longest, op.HighWatermark)
		}
	}
	return ix
}

type modelInput struct {
	Stream  string
	Produce bool
	Value   string
	From    int64
	Rank    int // unknown produces: position in (Invoke, ID) order within the stream
}

type modelOutput struct {
	Unknown bool // produce with unknown outcome: append at whatever the length is
	Offset  int64
	Records []Record
	HWM     int64
}

// newModel returns the porcupine model of a set of streams, partitioned by stream.
//
// Produce ok at offset o: legal iff o == length; appends. Fetch from f: records must be
// contiguous from f, each < length and matching the index (a prefix of [f, length): partial
// results are fine), and a reported HWM must equal the length — without that check a stale
// read (empty or short, from a lagging replica) is invisible.
//
// Unknown produce (its return is the end of the history). With tail (after Patch: every
// unknown is unseen) unknowns linearize one at a time in rank order; below L one appends
// where the index allows (a free slot: nobody observed that offset); at length >= L it is
// a no-op allowed only after every definite op. Why that loses no valid linearization:
// a write that did not happen, or happened where nobody observed it, is equivalent to one
// placed last; and unseen unknowns are interchangeable except for their invoke times — if X
// fills a slot while an earlier-invoked Y is unused or fills a later slot, swapping them is
// still valid (Y was invoked no later, the slots' contents are unobserved). Fixing the order
// keeps porcupine from trying every subset and permutation of unknowns (it was exponential
// on failing histories). Without tail (NoPatch, the raw treatment) an unknown appends
// wherever the index allows — sound, but exponential with many unknowns.
func newModel(idx map[string]*streamIndex, tail bool) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byStream := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range history {
				s := op.Input.(modelInput).Stream
				if _, ok := byStream[s]; !ok {
					names = append(names, s)
				}
				byStream[s] = append(byStream[s], op)
			}
			sort.Strings(names)
			out := make([][]porcupine.Operation, len(names))
			for i, n := range names {
				out[i] = byStream[n]
			}
			return out
		},
		Init: func() any { return logState{} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(logState)
			in := input.(modelInput)
			out := output.(modelOutput)
			ix := idx[in.Stream]
			if in.Produce && out.Unknown && tail {
				if in.Rank != s.Unk {
					return false, s
				}
				s.Unk++
				if s.Len >= ix.longest {
					return s.Done == ix.definite, s
				}
			}
			if in.Produce {
				if !out.Unknown && out.Offset != s.Len {
					return false, s
				}
				if ix.conflict[s.Len] {
					return false, s
				}
				if v, ok := ix.vals[s.Len]; ok && v != in.Value {
					return false, s
				}
				next := logState{Len: s.Len + 1, Done: s.Done, Unk: s.Unk, Hash: roll(s.Hash, in.Value)}
				if !out.Unknown {
					next.Done++
				}
				return true, next
			}
			if out.HWM >= 0 && out.HWM != s.Len {
				return false, s
			}
			for i, r := range out.Records {
				if r.Offset != in.From+int64(i) || r.Offset >= s.Len || ix.conflict[r.Offset] || ix.vals[r.Offset] != r.Value {
					return false, s
				}
			}
			s.Done++
			return true, s
		},
		// Equal ignores the hash. Every offset an op observes or claims is pinned by the
		// index, so two logs of one length differ only in the order of unobserved unknown
		// writes, and no future step can tell them apart. Comparing the hash too would make
		// porcupine's cache miss on every ordering of concurrent unknowns (k! instead of 2^k).
		Equal: func(a, b any) bool {
			x, y := a.(logState), b.(logState)
			return x.Len == y.Len && x.Done == y.Done && x.Unk == y.Unk
		},
		Hash: func(state any) uint64 {
			s := state.(logState)
			return uint64(s.Len)*0x9e3779b97f4a7c15 ^ uint64(s.Done) ^ uint64(s.Unk)<<32
		},
		DescribeOperation: func(input, output any) string {
			in := input.(modelInput)
			out := output.(modelOutput)
			if in.Produce {
				if out.Unknown {
					return fmt.Sprintf("produce(%s) → ?", in.Value)
				}
				return fmt.Sprintf("produce(%s) → %d", in.Value, out.Offset)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "fetch(%d) → [", in.From)
			for i, r := range out.Records {
				if i == 8 {
					fmt.Fprintf(&b, " …%d more", len(out.Records)-i)
					break
				}
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%d:%s", r.Offset, r.Value)
			}
			b.WriteByte(']')
			if out.HWM >= 0 {
				fmt.Fprintf(&b, " hwm=%d", out.HWM)
			}
			return b.String()
		},
		DescribeState: func(state any) string {
			s := state.(logState)
			return fmt.Sprintf("len=%d hash=%016x done=%d unknown=%d", s.Len, s.Hash, s.Done, s.Unk)
		},
		DescribeOperationMetadata: func(info any) string {
			if info == nil {
				return ""
			}
			return info.(string)
		},
	}
}

// toOperations converts checked ops to porcupine operations. Unknown produces return one
// tick after the last op (equivalent to ∞). ClientId is a display lane: ops are packed into
// the fewest non-overlapping lanes (pipelined requests of one client overlap).
func toOperations(ops []Op) []porcupine.Operation {
	var end int64
	for i := range ops {
		end = max(end, ops[i].Complete, ops[i].Invoke)
	}
	end++
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := &ops[order[a]], &ops[order[b]]
		return x.Invoke < y.Invoke || x.Invoke == y.Invoke && x.ID < y.ID
	})
	rank := map[int]int{} // op index -> rank among its stream's unknown produces
	nextRank := map[string]int{}
	for _, i := range order {
		if ops[i].Kind == KindProduce && ops[i].Outcome != OutcomeOK {
			rank[i] = nextRank[ops[i].Stream]
			nextRank[ops[i].Stream]++
		}
	}
	var laneEnd []int64
	res := make([]porcupine.Operation, 0, len(ops))
	for _, i := range order {
		op := &ops[i]
		ret := op.Complete
		out := modelOutput{Offset: op.Offset, Records: op.Records, HWM: op.HighWatermark}
		if op.Kind == KindProduce {
			out.HWM = -1
			if op.Outcome != OutcomeOK {
				out.Unknown = true
				ret = end
			}
		}
		lane := -1
		for l, e := range laneEnd {
			if e < op.Invoke {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(laneEnd)
			laneEnd = append(laneEnd, 0)
		}
		laneEnd[lane] = ret
		meta := fmt.Sprintf("op %d client %d conn %d seq %d %s", op.ID, op.Client, op.Conn, op.Seq, op.Outcome)
		if op.Patched {
			meta += " (patched from info)"
		}
		if op.Final {
			meta += " final-read"
		}
		res = append(res, porcupine.Operation{
			ClientId: lane,
			Input:    modelInput{Stream: op.Stream, Produce: op.Kind == KindProduce, Value: op.Value, From: op.From, Rank: rank[i]},
			Call:     op.Invoke,
			Output:   out,
			Return:   ret,
			Metadata: meta,
		})
	}
	return res
}

// linResult is the outcome of the linearizability check of some streams.
type linResult struct {
	result   porcupine.CheckResult
	info     porcupine.LinearizationInfo
	model    porcupine.Model
	duration time.Duration
}

// checkLinearizable runs porcupine over already patched ops (one or more streams). A
// timeout returns porcupine.Unknown, which callers must treat as a failure.
func checkLinearizable(ops []Op, timeout time.Duration, tail bool) linResult {
	byStream := map[string][]Op{}
	for _, op := range ops {
		byStream[op.Stream] = append(byStream[op.Stream], op)
	}
	idx := map[string]*streamIndex{}
	for s, sops := range byStream {
		idx[s] = buildIndex(sops)
	}
	m := newModel(idx, tail)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(m, toOperations(ops), timeout)
	return linResult{result: res, info: info, model: m, duration: time.Since(start)}
}

// visualize writes porcupine's history.html for lr, with fault windows and notes (anomalies,
// ordering violations) as annotations.
func visualize(path string, lr linResult, faults []FaultWindow, notes []porcupine.Annotation) error {
	anns := make([]porcupine.Annotation, 0, len(faults)+len(notes))
	for _, f := range faults {
		anns = append(anns, porcupine.Annotation{
			Tag:             "fault: " + f.Kind,
			Start:           f.Start,
			End:             f.End,
			Description:     f.Kind,
			Details:         f.Detail,
			BackgroundColor: "#f8d0d0",
		})
	}
	anns = append(anns, notes...)
	lr.info.AddAnnotations(anns)
	return porcupine.VisualizePath(lr.model, lr.info, path)
}
