package checker

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// genHistory simulates a correct server: per stream one log; each connection's requests are
// applied in send order and answered in order; a definitely failed produce poisons the
// connection (later requests fail) and the client abandons it; clients time out (info:
// the request may or may not have been applied) and NOT_LEADER answers (info, not applied).
// Interleavings across connections are random. The history must pass every check.
func genHistory(seed uint64, withFinal bool) []Op {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	streams := []string{"s0", "s1"}[:1+r.IntN(2)]
	logs := map[string][]string{}
	useRespSeq := r.IntN(2) == 0
	type req struct {
		op      *Op
		outcome Outcome
	}
	type conn struct {
		id       int
		client   int
		seq      int64
		resp     int64
		queue    []*req // sent, not applied
		answered []*req // applied, response not read yet
		poisoned bool
		pos      map[string]int64
	}
	var ops []*Op
	t := int64(0)
	nextConn := 0
	newConn := func(client int) *conn {
		nextConn++
		return &conn{id: nextConn, client: client, pos: map[string]int64{}}
	}
	nClients := 2 + r.IntN(4)
	clients := make([]*conn, nClients)
	for i := range clients {
		clients[i] = newConn(i)
	}
	abandon := func(c *conn) {
		for _, q := range append(c.queue, c.answered...) {
			q.op.Outcome, q.op.Complete, q.op.Err = OutcomeInfo, t, "abandoned"
		}
		clients[c.client] = newConn(c.client)
	}
	steps := 60 + r.IntN(120)
	if r.IntN(10) == 0 {
		steps = 600
	}
	for range steps {
		t += 1 + int64(r.IntN(5))
		c := clients[r.IntN(nClients)]
		switch a := r.IntN(10); {
		case a < 4 && len(c.queue)+len(c.answered) < 3: // send
			c.seq++
			s := streams[r.IntN(len(streams))]
			op := &Op{ID: len(ops), Stream: s, Client: c.client, Conn: c.id, Seq: c.seq, Invoke: t, Outcome: OutcomeInfo, HighWatermark: -1, Offset: -1}
			fetching := false // consumers do not pipeline fetches of one stream
			for _, q := range append(c.queue, c.answered...) {
				fetching = fetching || (q.op.Kind == KindFetch && q.op.Stream == s)
			}
			if fetching || r.IntN(3) > 0 {
				op.Kind, op.Value = KindProduce, fmt.Sprintf("%s-v%d", s, len(ops))
			} else {
				op.Kind, op.From = KindFetch, c.pos[s]
				if r.IntN(5) == 0 {
					op.From, op.Seek = int64(r.IntN(len(logs[s])+2)), true
				}
			}
			ops = append(ops, op)
			c.queue = append(c.queue, &req{op: op})
		case a < 7 && len(c.queue) > 0: // the server applies the head request
			q := c.queue[0]
			c.queue = c.queue[1:]
			op := q.op
			log := logs[op.Stream]
			switch {
			case c.poisoned:
				q.outcome = OutcomeFail
			case op.Kind == KindProduce && r.IntN(20) == 0:
				q.outcome, c.poisoned = OutcomeFail, true
			case op.Kind == KindProduce && r.IntN(20) == 0:
				q.outcome = OutcomeInfo // NOT_LEADER: not applied
			case op.Kind == KindProduce:
				q.outcome, op.Offset = OutcomeOK, int64(len(log))
				logs[op.Stream] = append(log, op.Value)
			case op.From > int64(len(log)):
				q.outcome = OutcomeFail // OFFSET_OUT_OF_RANGE
			default:
				q.outcome = OutcomeOK
				n := min(int64(len(log))-op.From, int64(r.IntN(6)))
				for i := range n {
					o := op.From + i
					op.Records = append(op.Records, Record{Offset: o, Value: log[o]})
				}
				if r.IntN(5) > 0 {
					op.HighWatermark = int64(len(log))
				}
			}
			c.answered = append(c.answered, q)
		case a < 9 && len(c.answered) > 0: // the client reads the next response
			q := c.answered[0]
			c.answered = c.answered[1:]
			op := q.op
			op.Outcome, op.Complete = q.outcome, t
			if useRespSeq {
				c.resp++
				op.RespSeq = c.resp
			}
			if op.Kind == KindFetch && op.Outcome == OutcomeOK {
				c.pos[op.Stream] = op.From + int64(len(op.Records))
			}
			if op.Outcome != OutcomeOK {
				op.Offset, op.Records, op.HighWatermark = -1, nil, -1
				op.Err = "error"
			}
			if op.Kind == KindProduce && op.Outcome == OutcomeFail {
				abandon(c)
			}
		case a == 9 && len(c.queue)+len(c.answered) > 0: // timeout
			abandon(c)
		}
	}
	for _, c := range clients {
		abandon(c)
	}
	// Requests never answered are unknown; their stored results are what the server did,
	// which the client never learnt.
	for _, op := range ops {
		if op.Outcome == OutcomeInfo {
			op.Offset, op.Records, op.HighWatermark = -1, nil, -1
			if op.Complete < op.Invoke {
				op.Complete = t
			}
		}
	}
	if withFinal {
		for i, s := range streams {
			t += 10
			op := &Op{ID: len(ops), Stream: s, Client: 1000, Conn: 1000 + i, Seq: 1, Kind: KindFetch, Invoke: t, Complete: t + 1,
				Outcome: OutcomeOK, HighWatermark: int64(len(logs[s])), Final: true}
			for o, v := range logs[s] {
				op.Records = append(op.Records, Record{Offset: int64(o), Value: v})
			}
			ops = append(ops, op)
		}
	}
	out := make([]Op, len(ops))
	for i, op := range ops {
		out[i] = *op
	}
	return out
}

func clone(h []Op) []Op {
	out := make([]Op, len(h))
	for i, op := range h {
		out[i] = op
		out[i].Records = append([]Record(nil), op.Records...)
	}
	return out
}

// A mutation breaks a correct history in a way some check must catch; false if the history
// offers no place for it.
type mutation func(h []Op, r *rand.Rand) bool

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func finalIndex(h []Op, stream string) int {
	for i := range h {
		if h[i].Final && h[i].Stream == stream {
			return i
		}
	}
	return -1
}

func ackedProduces(h []Op) []int {
	var xs []int
	for i := range h {
		if h[i].Kind == KindProduce && h[i].Outcome == OutcomeOK {
			xs = append(xs, i)
		}
	}
	return xs
}

var mutations = map[string]mutation{
	// An ack names the wrong offset: the final read shows the value elsewhere.
	"wrong-offset": func(h []Op, r *rand.Rand) bool {
		xs := ackedProduces(h)
		if len(xs) == 0 {
			return false
		}
		i := pick(r, xs)
		if finalIndex(h, h[i].Stream) < 0 {
			return false // unobserved, a shifted offset may be legal (an unknown write filled the gap)
		}
		h[i].Offset += 1 + int64(r.IntN(2))
		return true
	},
	// A fetch reports a HWM below a write acked before it began.
	"stale-read": func(h []Op, r *rand.Rand) bool {
		var cands [][2]int
		for i := range h {
			f := &h[i]
			if f.Kind != KindFetch || f.Outcome != OutcomeOK || f.HighWatermark <= 0 {
				continue
			}
			for j := range h {
				p := &h[j]
				if p.Kind == KindProduce && p.Outcome == OutcomeOK && p.Stream == f.Stream && p.Offset == f.HighWatermark-1 && p.Complete < f.Invoke {
					cands = append(cands, [2]int{i, j})
				}
			}
		}
		if len(cands) == 0 {
			return false
		}
		c := pick(r, cands)
		f := &h[c[0]]
		f.HighWatermark = h[c[1]].Offset
		var keep []Record
		for _, rec := range f.Records {
			if rec.Offset < f.HighWatermark {
				keep = append(keep, rec)
			}
		}
		f.Records = keep
		return true
	},
	// The final read ends before an acked write.
	"lost-write": func(h []Op, r *rand.Rand) bool {
		xs := ackedProduces(h)
		if len(xs) == 0 {
			return false
		}
		p := h[pick(r, xs)]
		fi := finalIndex(h, p.Stream)
		if fi < 0 {
			return false
		}
		h[fi].Records = h[fi].Records[:p.Offset]
		h[fi].HighWatermark = p.Offset
		return true
	},
	// The final read shows a value twice.
	"duplicate": func(h []Op, r *rand.Rand) bool {
		xs := ackedProduces(h)
		if len(xs) == 0 {
			return false
		}
		p := h[pick(r, xs)]
		fi := finalIndex(h, p.Stream)
		if fi < 0 {
			return false
		}
		f := &h[fi]
		f.Records = append(f.Records, Record{Offset: int64(len(f.Records)), Value: p.Value})
		f.HighWatermark++
		return true
	},
	// A write reported as definitely failed was read.
	"aborted-read": func(h []Op, r *rand.Rand) bool {
		xs := ackedProduces(h)
		if len(xs) == 0 {
			return false
		}
		i := pick(r, xs)
		if finalIndex(h, h[i].Stream) < 0 {
			return false
		}
		h[i].Outcome, h[i].Offset = OutcomeFail, -1
		return true
	},
	// Two responses on one connection arrive out of send order.
	"reorder": func(h []Op, r *rand.Rand) bool {
		byConnSeq := map[[2]int64]int{}
		for i := range h {
			byConnSeq[[2]int64{int64(h[i].Conn), h[i].Seq}] = i
		}
		var cands [][2]int
		for i := range h {
			j, ok := byConnSeq[[2]int64{int64(h[i].Conn), h[i].Seq + 1}]
			responded := func(op *Op) bool { return op.Outcome != OutcomeInfo || op.RespSeq > 0 }
			if ok && responded(&h[i]) && responded(&h[j]) && (h[i].RespSeq > 0) == (h[j].RespSeq > 0) && h[i].Complete < h[j].Complete {
				cands = append(cands, [2]int{i, j})
			}
		}
		if len(cands) == 0 {
			return false
		}
		c := pick(r, cands)
		h[c[0]].Seq, h[c[1]].Seq = h[c[1]].Seq, h[c[0]].Seq
		return true
	},
	// A fetch returns a value nobody wrote.
	"phantom": func(h []Op, r *rand.Rand) bool {
		var cands []int
		for i := range h {
			if h[i].Kind == KindFetch && h[i].Outcome == OutcomeOK && len(h[i].Records) > 0 {
				cands = append(cands, i)
			}
		}
		if len(cands) == 0 {
			return false
		}
		f := &h[pick(r, cands)]
		f.Records[r.IntN(len(f.Records))].Value = "ghost"
		return true
	},
	// A write that never landed is reported acknowledged.
	"phantom-ack": func(h []Op, r *rand.Rand) bool {
		read := map[string]bool{}
		for _, op := range h {
			for _, rec := range op.Records {
				read[rec.Value] = true
			}
		}
		var cands []int
		for i := range h {
			if h[i].Kind == KindProduce && h[i].Outcome == OutcomeInfo && !read[h[i].Value] && finalIndex(h, h[i].Stream) >= 0 {
				cands = append(cands, i)
			}
		}
		if len(cands) == 0 {
			return false
		}
		p := &h[pick(r, cands)]
		p.Outcome, p.Complete = OutcomeOK, p.Invoke+1
		p.Offset = h[finalIndex(h, p.Stream)].HighWatermark
		p.RespSeq = 0
		return true
	},
}

// okAfterFail appends an ok fetch on a connection after its failed produce (it grows the
// history, so it is not a mutation). An empty fetch without HWM is linearizable anywhere:
// only the ordering check sees it.
func okAfterFail(h []Op, r *rand.Rand) ([]Op, bool) {
	var cands []int
	for i := range h {
		if h[i].Kind == KindProduce && h[i].Outcome == OutcomeFail {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return h, false
	}
	f := h[pick(r, cands)]
	var maxSeq int64
	maxID := 0
	for _, op := range h {
		if op.Conn == f.Conn {
			maxSeq = max(maxSeq, op.Seq)
		}
		maxID = max(maxID, op.ID)
	}
	return append(h, Op{ID: maxID + 1, Stream: f.Stream, Client: f.Client, Conn: f.Conn, Seq: maxSeq + 1, Kind: KindFetch,
		Invoke: f.Complete, Complete: f.Complete, Outcome: OutcomeOK, HighWatermark: -1, Seek: true}), true
}

func TestRandomHistories(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 100
	}
	caught := map[string]int{}
	start := time.Now()
	var ops, patched, dropped, unknown int
	for seed := range uint64(seeds) {
		withFinal := seed%5 != 0
		h := genHistory(seed, withFinal)
		res := Check(h, Options{Timeout: 5 * time.Second})
		require.True(t, res.OK, "seed %d: correct history rejected:\n%s", seed, res.Markdown())
		ops += len(h)
		for _, s := range res.Streams {
			patched += s.Patch.Patched
			dropped += s.Patch.DroppedProduces
			unknown += s.Patch.Unknown
		}

		r := rand.New(rand.NewPCG(seed, 7))
		for _, name := range sortedKeys(mutations) {
			m := clone(h)
			if !mutations[name](m, r) {
				continue
			}
			res := Check(m, Options{Timeout: 5 * time.Second})
			require.False(t, res.OK, "seed %d: mutation %s not caught", seed, name)
			if res.Millis > 300 {
				t.Logf("seed %d mutation %s: %.0f ms %s", seed, name, res.Millis, res.Markdown())
			}
			caught[name]++
		}
		if m, ok := okAfterFail(clone(h), r); ok {
			res := Check(m, Options{Timeout: 5 * time.Second})
			require.False(t, res.OK, "seed %d: mutation ok-after-fail not caught", seed)
			require.Positive(t, res.Ordering.Count)
			caught["ok-after-fail"]++
		}
	}
	t.Logf("%d seeds, %d ops; unknown produces: %d patched, %d dropped, %d kept; mutations caught %v; %s",
		seeds, ops, patched, dropped, unknown, caught, time.Since(start))
	for _, name := range append(sortedKeys(mutations), "ok-after-fail") {
		require.Positive(t, caught[name], "mutation %s never applied", name)
	}
}
