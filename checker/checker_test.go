package checker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Builders for hand-written histories on stream "s". Client == Conn unless changed.

func prod(id, conn int, seq, inv, comp int64, v string, off int64) Op {
	return Op{ID: id, Stream: "s", Client: conn, Conn: conn, Seq: seq, Kind: KindProduce, Invoke: inv, Complete: comp,
		Outcome: OutcomeOK, Value: v, Offset: off, HighWatermark: -1}
}

func prodOut(id, conn int, seq, inv, comp int64, v string, out Outcome) Op {
	op := prod(id, conn, seq, inv, comp, v, -1)
	op.Outcome = out
	return op
}

func fetch(id, conn int, seq, inv, comp, from, hwm int64, vals ...string) Op {
	op := Op{ID: id, Stream: "s", Client: conn, Conn: conn, Seq: seq, Kind: KindFetch, Invoke: inv, Complete: comp,
		Outcome: OutcomeOK, From: from, HighWatermark: hwm}
	for i, v := range vals {
		op.Records = append(op.Records, Record{Offset: from + int64(i), Value: v})
	}
	return op
}

func final(op Op) Op {
	op.Final = true
	return op
}

func check(t *testing.T, h []Op) *Result {
	t.Helper()
	return Check(h, Options{Timeout: 10 * time.Second})
}

func anomalyCount(r *Result, k AnomalyKind) int {
	n := 0
	for _, s := range r.Streams {
		if a := s.Anomalies[k]; a != nil {
			n += a.Count
		}
	}
	return n
}

func orderingCount(r *Result, k ViolationKind) int {
	n := 0
	for _, v := range r.Ordering.Examples {
		if v.Kind == k {
			n++
		}
	}
	return n
}

func TestLinearizableConcurrentPasses(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 2, 1, 2, 12, "b", 1),
		fetch(2, 3, 1, 5, 7, 0, 1, "a"), // between the two appends
		prod(3, 1, 2, 11, 20, "c", 2),
		fetch(4, 3, 2, 15, 25, 1, 3, "b"), // partial result: prefix of [1, 3)
		final(fetch(5, 4, 1, 30, 31, 0, 3, "a", "b", "c")),
	}
	r := check(t, h)
	require.True(t, r.OK, r.Markdown())
	assert.Equal(t, "Ok", r.Streams[0].Porcupine)
	assert.Equal(t, 6, r.Streams[0].Checked)
}

func TestStaleReadCaughtOnlyByHWM(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		fetch(1, 2, 1, 20, 30, 0, 0), // began after "a" was acked, reports an empty log
		final(fetch(2, 3, 1, 40, 50, 0, 1, "a")),
	}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, "Illegal", r.Streams[0].Porcupine)
	assert.Empty(t, r.Streams[0].Anomalies, "no anomaly sees it")
	assert.Zero(t, r.Ordering.Count)

	h[1].HighWatermark = -1 // same read without the HWM: indistinguishable from a partial read
	assert.True(t, check(t, h).OK)
}

func TestProduceAckedAtWrongOffset(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 2, 1, 20, 30, "b", 2), // offset 1 was never written
	}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, "Illegal", r.Streams[0].Porcupine)
	h[1].Offset = 1
	assert.True(t, check(t, h).OK)
}

func TestUnknownProducesSeenAndUnseenPass(t *testing.T) {
	h := []Op{
		prodOut(0, 1, 1, 0, 1000, "x", OutcomeInfo), // timed out, but landed
		prod(1, 2, 1, 5, 10, "a", 1),
		prodOut(2, 3, 1, 6, 1000, "y", OutcomeInfo), // timed out, never landed
		prodOut(3, 4, 1, 7, 15, "z", OutcomeFail),
		fetch(4, 5, 1, 3, 1001, 0, 2, "x", "a"),
		fetch(5, 6, 1, 20, 1002, 0, 1, "x"), // info fetch: dropped
		final(fetch(6, 7, 1, 2000, 2001, 0, 2, "x", "a")),
	}
	h[5].Outcome = OutcomeInfo
	r := check(t, h)
	require.True(t, r.OK, r.Markdown())
	st := r.Streams[0].Patch
	assert.Equal(t, PatchStats{Patched: 1, DroppedProduces: 1, DroppedFetches: 1, ExcludedFailed: 1}, st)

	// x's complete becomes the earliest proof that offset 0 exists: "a" acked at 1, t=10.
	patched, _ := Patch(h)
	for _, op := range patched {
		if op.Value == "x" {
			assert.True(t, op.Patched)
			assert.Equal(t, int64(0), op.Offset)
			assert.Equal(t, int64(10), op.Complete)
		}
		assert.NotEqual(t, "y", op.Value)
	}
}

// unknownHeavy: n info produces invoked at 0 that never land and nobody reads, while the log
// grows to 20 and 30 fetches confirm HWM 20. Unpatched, porcupine tries every subset of
// unknowns before each fetch; patched (dropped, thanks to the final read) it is instant.
func unknownHeavy(n int) []Op {
	var h []Op
	id := 0
	add := func(op Op) { op.ID = id; id++; h = append(h, op) }
	for i := range n {
		add(prodOut(0, 100+i, 1, 0, 5000, fmt.Sprintf("u%d", i), OutcomeInfo))
	}
	var vals []string
	for i := range 20 {
		v := fmt.Sprintf("v%d", i)
		vals = append(vals, v)
		add(prod(0, 1, int64(i+1), int64(10*i+1), int64(10*i+5), v, int64(i)))
	}
	for i := range 30 {
		add(fetch(0, 2, int64(i+1), int64(300+10*i), int64(305+10*i), 20, 20))
	}
	add(final(fetch(0, 3, 1, 6000, 6001, 0, 20, vals...)))
	return h
}

func TestPatchingAvoidsTimeout(t *testing.T) {
	h := unknownHeavy(28)
	r := Check(h, Options{Timeout: 300 * time.Millisecond, NoPatch: true})
	assert.False(t, r.OK)
	assert.Equal(t, "Unknown", r.Streams[0].Porcupine, "a timeout must fail, not pass")
	assert.Contains(t, r.Markdown(), "timed out")

	start := time.Now()
	r = Check(h, Options{Timeout: 10 * time.Second})
	require.True(t, r.OK, r.Markdown())
	assert.Less(t, time.Since(start), time.Second)
	assert.Equal(t, 28, r.Streams[0].Patch.DroppedProduces)
}

func TestLostWrite(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 1, 2, 11, 20, "b", 1),
		prod(2, 1, 3, 21, 30, "c", 2),
		prod(3, 1, 4, 31, 40, "d", 3),
		fetch(4, 2, 1, 50, 60, 0, 4, "a", "b", "c", "d"),
	}
	require.True(t, check(t, h).OK)
	h[4] = fetch(4, 2, 1, 50, 60, 0, 3, "a", "c", "d") // the server lost b
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, LostWrite))
	assert.Equal(t, 0, anomalyCount(r, Unseen), "no final read")
}

func TestUnseen(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 1, 2, 11, 20, "b", 1),
		final(fetch(2, 2, 1, 50, 60, 0, 1, "a")),
	}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, Unseen))
	assert.Equal(t, 0, anomalyCount(r, LostWrite), "b is not below the highest offset read")
}

func TestDuplicate(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 1, 2, 11, 20, "b", 1),
		final(fetch(2, 2, 1, 50, 60, 0, 3, "a", "b", "a")),
	}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, Duplicate))
	assert.Equal(t, "Illegal", r.Streams[0].Porcupine)
}

func TestInconsistentOffset(t *testing.T) {
	h := []Op{
		prodOut(0, 1, 1, 0, 100, "a", OutcomeInfo),
		prodOut(1, 2, 1, 0, 100, "b", OutcomeInfo),
		fetch(2, 3, 1, 50, 60, 0, 1, "a"),
		fetch(3, 4, 1, 50, 60, 0, 1, "b"),
	}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, InconsistentOffset))
	assert.Equal(t, "Illegal", r.Streams[0].Porcupine)
}

func TestAbortedRead(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prodOut(1, 2, 1, 0, 10, "b", OutcomeInfo), // NOT_LEADER or timeout: indefinite
		final(fetch(2, 3, 1, 50, 60, 0, 2, "a", "b")),
	}
	require.True(t, check(t, h).OK, "an indefinite write that was read is fine")
	h[1].Outcome = OutcomeFail
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, AbortedRead))
}

func TestNonMonotonicSendAndPoll(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prod(1, 1, 2, 1, 11, "b", 1),
		fetch(2, 2, 1, 20, 21, 0, 2, "a"),
		fetch(3, 2, 2, 22, 23, 1, 2, "b"),
	}
	require.True(t, check(t, h).OK)

	poll := append([]Op(nil), h...)
	poll[3] = fetch(3, 2, 2, 22, 23, 0, 2, "a", "b") // back to 0 without a seek
	r := check(t, poll)
	assert.Equal(t, 1, anomalyCount(r, NonMonotonicPoll))
	poll[3].Seek = true
	assert.True(t, check(t, poll).OK)

	send := append([]Op(nil), h...)
	send[0].Offset, send[1].Offset = 1, 0 // pipelined acks go backwards
	send[2], send[3] = fetch(2, 2, 1, 20, 21, 0, 2, "b"), fetch(3, 2, 2, 22, 23, 1, 2, "a")
	r = check(t, send)
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, NonMonotonicSend))
	assert.Equal(t, 1, orderingCount(r, ProduceOrder))
	assert.Equal(t, "Ok", r.Streams[0].Porcupine, "concurrent ops: linearizable, yet the pipeline broke order")
}

func TestResponseOrder(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		fetch(1, 1, 2, 1, 12, 0, 1, "a"),
		prod(2, 1, 3, 2, 14, "b", 1),
	}
	require.True(t, check(t, h).OK)
	h[1].Complete = 9 // answered before the earlier request
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, orderingCount(r, ResponseOrder))

	// With explicit response positions, timestamps do not matter.
	h[0].RespSeq, h[1].RespSeq, h[2].RespSeq = 1, 2, 3
	require.True(t, check(t, h).OK)
	h[0].RespSeq, h[1].RespSeq = 2, 1
	r = check(t, h)
	assert.Equal(t, 1, orderingCount(r, ResponseOrder))

	// An info op's complete time is a client deadline, not a response.
	h = []Op{prodOut(0, 1, 1, 0, 5, "a", OutcomeInfo), prod(1, 1, 2, 1, 12, "b", 0)}
	assert.True(t, check(t, h).OK)
}

func TestOKAfterFailedProduce(t *testing.T) {
	h := []Op{
		prodOut(0, 1, 1, 0, 10, "a", OutcomeFail),
		prodOut(1, 1, 2, 1, 20, "b", OutcomeInfo), // client timeout: fine
		fetch(2, 2, 1, 30, 40, 0, 0),
	}
	require.True(t, check(t, h).OK)

	bad := append([]Op(nil), h...)
	bad[1] = prod(1, 1, 2, 1, 12, "b", 0)
	bad[2] = fetch(2, 2, 1, 30, 40, 0, 1, "b")
	r := check(t, bad)
	assert.False(t, r.OK)
	assert.Equal(t, 1, orderingCount(r, OKAfterFailure))
	assert.Equal(t, "Ok", r.Streams[0].Porcupine)

	// The same write reported as a timeout, but observed: it did succeed.
	bad[1].Outcome = OutcomeInfo
	r = check(t, bad)
	assert.Equal(t, 1, orderingCount(r, OKAfterFailure))
}

// A produce answered with an error code of unknown outcome (NOT_LEADER,
// REQUEST_TIMED_OUT) poisons its connection as well: no later request may
// be answered with success. A later write may land, though (the failed one
// may have landed too).
func TestOKAfterErrorCodeOfUnknownOutcome(t *testing.T) {
	timedOut := prodOut(0, 1, 1, 0, 10, "a", OutcomeInfo)
	timedOut.ErrCode, timedOut.Err = 7, "error 7"
	h := []Op{timedOut, prodOut(1, 1, 2, 1, 20, "b", OutcomeInfo), fetch(2, 2, 1, 30, 40, 0, 2, "a", "b")}
	require.True(t, check(t, h).OK, "both landed in order, neither answered ok after the error")

	h[1] = prod(1, 1, 2, 1, 12, "b", 1)
	r := check(t, h)
	assert.False(t, r.OK)
	assert.Equal(t, 1, orderingCount(r, OKAfterFailure), "an ok answer after an error answer on one connection")
}

func TestReplicaConvergence(t *testing.T) {
	recs := func(vals ...string) []ReplicaRecord {
		var out []ReplicaRecord
		for i, v := range vals {
			out = append(out, ReplicaRecord{Offset: int64(i), Bytes: []byte(v)})
		}
		return out
	}
	ok := CheckConvergence(map[string][]ReplicaRecord{
		"n1": recs("a", "b", "c", "d"), "n2": recs("a", "b", "c"), "n3": recs("a", "b"),
	})
	assert.True(t, ok.OK)
	assert.Equal(t, int64(2), ok.CommonEnd)
	assert.Equal(t, int64(-1), ok.FirstDiff)

	bad := CheckConvergence(map[string][]ReplicaRecord{
		"n1": recs("a", "b", "c", "d"), "n2": recs("a", "b", "c", "d"), "n3": recs("a", "b", "x", "d"),
	})
	assert.False(t, bad.OK)
	assert.Equal(t, int64(2), bad.FirstDiff)
	assert.Equal(t, [][]string{{"n1", "n2"}, {"n3"}}, bad.Groups)

	hashes := CheckConvergenceHashes(map[string]ReplicaHashes{
		"n1": {Start: 10, Hashes: []uint64{1, 2, 3}}, "n2": {Start: 11, Hashes: []uint64{2, 4}},
	})
	assert.False(t, hashes.OK)
	assert.Equal(t, int64(12), hashes.FirstDiff)

	gap := CheckConvergence(map[string][]ReplicaRecord{"n1": {{Offset: 0}, {Offset: 2}}})
	assert.False(t, gap.OK)

	h := []Op{prod(0, 1, 1, 0, 10, "a", 0)}
	r := Check(h, Options{Replicas: map[string]map[string][]ReplicaRecord{"s": {"n1": recs("a"), "n2": recs("b")}}})
	assert.False(t, r.OK)
	assert.Equal(t, int64(0), r.Streams[0].Convergence.FirstDiff)
}

func TestFinalLogOption(t *testing.T) {
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		prodOut(1, 2, 1, 0, 10, "b", OutcomeInfo),
		prodOut(2, 3, 1, 0, 10, "c", OutcomeInfo),
	}
	r := Check(h, Options{FinalLog: map[string][]string{"s": {"a", "c"}}})
	require.True(t, r.OK, r.Markdown())
	assert.Equal(t, 1, r.Streams[0].Patch.Patched)
	assert.Equal(t, 1, r.Streams[0].Patch.DroppedProduces)
	r = Check(h, Options{FinalLog: map[string][]string{"s": {"c"}}})
	assert.False(t, r.OK)
	assert.Equal(t, 1, anomalyCount(r, Unseen))
}

func TestMalformedHistory(t *testing.T) {
	h := []Op{prod(0, 1, 1, 0, 10, "a", 0), prod(0, 1, 1, 20, 10, "a", 1)}
	r := check(t, h)
	assert.False(t, r.OK)
	assert.GreaterOrEqual(t, len(r.Errors), 3) // id, (conn, seq), complete<invoke, value
}

func TestSaveLoadRoundTrip(t *testing.T) {
	h := unknownHeavy(3)
	h[0].Err = "timeout"
	var buf bytes.Buffer
	require.NoError(t, Save(&buf, h))
	assert.Equal(t, len(h), strings.Count(buf.String(), "\n"))
	got, err := Load(&buf)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	_, err = Load(strings.NewReader("{\"id\":1}\nnot json\n"))
	assert.ErrorContains(t, err, "line 2")
}

func TestRecorderConcurrent(t *testing.T) {
	rec := NewRecorder(nil)
	var mu sync.Mutex // stands in for a shared connection: send and read in order
	var wg sync.WaitGroup
	var offset int64
	log := []string{}
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				v := fmt.Sprintf("c%d-%d", c, i)
				mu.Lock()
				h := rec.Invoke(Op{Kind: KindProduce, Stream: "s", Client: c, Conn: 0, Value: v})
				log = append(log, v)
				h.ProduceOK(offset)
				offset++
				mu.Unlock()
			}
			mu.Lock()
			f := rec.Invoke(Op{Kind: KindFetch, Stream: "s", Client: c, Conn: 1 + c})
			recs := make([]Record, len(log))
			for o, v := range log {
				recs[o] = Record{Offset: int64(o), Value: v}
			}
			mu.Unlock()
			f.FetchOK(recs, int64(len(recs)))
		}()
	}
	pending := rec.Invoke(Op{Kind: KindProduce, Stream: "s", Client: 9, Conn: 99, Value: "never"})
	wg.Wait()
	h := rec.History()
	require.Len(t, h, 8*51+1)
	never := func(h []Op) Op {
		for _, op := range h {
			if op.Value == "never" {
				return op
			}
		}
		panic("missing")
	}
	assert.Equal(t, OutcomeInfo, never(h).Outcome, "not completed: unknown")
	r := Check(h, Options{})
	require.True(t, r.OK, r.Markdown())
	assert.Zero(t, r.Ordering.Count)
	pending.Info("timeout", false)
	assert.Equal(t, int64(0), never(rec.History()).RespSeq)
}

func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 0),
		fetch(1, 2, 1, 20, 30, 0, 0),
		final(fetch(2, 3, 1, 40, 50, 0, 1, "a")),
	}
	faults := []FaultWindow{{Start: 5, End: 25, Kind: "partition", Detail: "n1 | n2 n3"}}
	r := Check(h, Options{OutDir: dir, Faults: faults})
	require.False(t, r.OK)
	html, err := os.ReadFile(filepath.Join(dir, "history.html"))
	require.NoError(t, err)
	assert.Contains(t, string(html), "n1 | n2 n3")
	js, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	assert.Contains(t, string(js), `"porcupine": "Illegal"`)
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "FAIL")
	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	saved, err := Load(f)
	require.NoError(t, err)
	assert.Equal(t, h, saved)

	// Re-check offline: same verdict. Passing runs write no html.
	dir2 := t.TempDir()
	h[1].HighWatermark = 1
	h[1].Records = []Record{{Offset: 0, Value: "a"}}
	r = Check(h, Options{OutDir: dir2})
	require.True(t, r.OK, r.Markdown())
	_, err = os.Stat(filepath.Join(dir2, "history.html"))
	assert.True(t, os.IsNotExist(err))
}

func TestMultiStreamFailureHTML(t *testing.T) {
	dir := t.TempDir()
	h := []Op{
		prod(0, 1, 1, 0, 10, "a", 1),
		prod(1, 2, 1, 0, 10, "a", 1),
		fetch(2, 3, 1, 20, 30, 0, 0),
	}
	h[1].Stream, h[2].Stream = "t", "t"
	r := Check(h, Options{OutDir: dir})
	require.False(t, r.OK)
	require.Len(t, r.Streams, 2)
	assert.False(t, r.Streams[0].OK)
	assert.False(t, r.Streams[1].OK)
	assert.FileExists(t, filepath.Join(dir, "history.html"))
}

// retry marks op as a retry of its value by client cl (an idempotent producer resending).
func retry(op Op, cl int) Op {
	op.Retry, op.Client = true, cl
	return op
}

// A write retried on a new connection after an unknown and a definitely failed attempt is
// one write: acknowledged once, read once, it passes (no aborted read for the failed
// attempt, no duplicate, linearizable with the write's whole span).
func TestRetriedWriteIsOneWrite(t *testing.T) {
	a1 := prodOut(0, 1, 1, 0, 30, "a", OutcomeInfo)
	b1 := prodOut(1, 1, 2, 1, 30, "b", OutcomeInfo)
	a2 := retry(prodOut(2, 2, 1, 31, 35, "a", OutcomeFail), 1) // backpressure: refused
	a2.ErrCode = 19
	a3 := retry(prod(3, 3, 1, 40, 45, "a", 0), 1)
	b3 := retry(prod(4, 3, 2, 41, 46, "b", 1), 1)
	h := []Op{a1, b1, a2, a3, b3, final(fetch(5, 9, 1, 50, 60, 0, 2, "a", "b"))}
	r := check(t, h)
	require.True(t, r.OK, r.Markdown())
	require.Equal(t, 3, r.Streams[0].Ops, "two writes and the final read")

	// A retry answered with the original's offset: the same.
	h = []Op{prodOut(0, 1, 1, 0, 30, "a", OutcomeInfo), retry(prod(1, 2, 1, 31, 35, "a", 0), 1),
		retry(prod(2, 3, 1, 36, 38, "a", 0), 1), final(fetch(3, 9, 1, 50, 60, 0, 1, "a"))}
	r = check(t, h)
	require.True(t, r.OK, r.Markdown())
}

// A retried write that landed twice is a duplicate, and the log is not linearizable.
func TestRetriedWriteLandingTwice(t *testing.T) {
	h := []Op{
		prodOut(0, 1, 1, 0, 30, "a", OutcomeInfo),
		retry(prod(1, 2, 1, 31, 35, "a", 1), 1),
		final(fetch(2, 9, 1, 50, 60, 0, 2, "a", "a")),
	}
	r := check(t, h)
	require.False(t, r.OK)
	require.Equal(t, 1, anomalyCount(r, Duplicate))
	require.Equal(t, "Illegal", r.Streams[0].Porcupine)

	// Two acknowledgements at different offsets.
	h = []Op{
		prod(0, 1, 1, 0, 30, "a", 0),
		retry(prod(1, 2, 1, 31, 35, "a", 1), 1),
		final(fetch(2, 9, 1, 50, 60, 0, 2, "a", "a")),
	}
	r = check(t, h)
	require.False(t, r.OK)
	require.Equal(t, 1, anomalyCount(r, Duplicate))
}

// Retries must be by the client that produced the value first, of a value it produced.
func TestRetryValidation(t *testing.T) {
	errs := Validate([]Op{prod(0, 1, 1, 0, 10, "a", 0), retry(prod(1, 2, 1, 11, 20, "a", 0), 2)})
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "retried by client 2")
	errs = Validate([]Op{retry(prod(0, 1, 1, 0, 10, "a", 0), 1)})
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "never produced before")
	require.Empty(t, Validate([]Op{prod(0, 1, 1, 0, 10, "a", 0), retry(prod(1, 2, 1, 11, 20, "a", 0), 1)}))
}
