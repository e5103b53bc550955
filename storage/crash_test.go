package storage

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/vfs"
)

// Randomized crash test over vfs.Mem. Replay one seed with
//
//	go test ./storage/ -run TestCrash -seed=N   (or VDL_CRASH_SEED=N)
//
// and run more with -seeds=N (or VDL_CRASH_SEEDS=N).
var (
	crashSeeds = flag.Int("seeds", 0, "number of seeds for TestCrash (default 2000, 150 under -race or -short; or VDL_CRASH_SEEDS)")
	crashSeed  = flag.Int64("seed", -1, "run only this seed (or VDL_CRASH_SEED)")
)

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func TestCrash(t *testing.T) {
	seeds := int64(*crashSeeds)
	if seeds == 0 {
		seeds = envInt("VDL_CRASH_SEEDS", 2000)
	}
	if testing.Short() || raceEnabled {
		seeds = min(seeds, 150)
	}
	first := int64(0)
	if s := *crashSeed; s >= 0 {
		first, seeds = s, 1
	} else if s := envInt("VDL_CRASH_SEED", -1); s >= 0 {
		first, seeds = s, 1
	}
	start := time.Now()
	for seed := first; seed < first+seeds; seed++ {
		if err := crashRun(seed); err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./storage/ -run TestCrash -seed=%d", seed, err, seed)
		}
	}
	t.Logf("%d seeds in %v", seeds, time.Since(start).Round(time.Millisecond))
}

// modelLog is one state of the log: entries first..first+len-1.
type modelLog struct {
	first uint64
	ents  []*pb.Entry
}

func (m modelLog) last() uint64 { return m.first + uint64(len(m.ents)) - 1 }

func (m modelLog) clone() modelLog {
	return modelLog{first: m.first, ents: append([]*pb.Entry(nil), m.ents...)}
}

type crashWorld struct {
	r     *rand.Rand
	mem   *vfs.Mem
	opts  Options
	l     *Log
	cur   modelLog
	term  uint64
	hs    state // newest hard state written
	apply uint64

	// Since the last successful Sync: every log state, hard state and
	// applied value that may be what a crash leaves.
	states  []modelLog
	hss     []state
	minLen  uint64 // entries of the synced state no later write truncated: last index
	syncApp uint64
	maxApp  uint64
}

var trace = os.Getenv("VDL_CRASH_TRACE") != ""

func crashRun(seed int64) (err error) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	w := &crashWorld{r: r, mem: vfs.NewMem(), term: 1}
	w.opts = Options{FS: w.mem, Dir: "/d/s", Stream: 99, SegmentSize: int64(1+r.IntN(4)) << 10, TailCacheBytes: int64(r.IntN(8)) << 10}
	if w.l, err = Open(w.opts); err != nil {
		return err
	}
	w.cur = modelLog{first: 1}
	w.markSynced()
	ops := 100 + r.IntN(200)
	for op := 0; op < ops; op++ {
		var err error
		x := r.IntN(100)
		switch {
		case x < 45:
			err = w.write(false)
		case x < 52:
			err = w.write(true)
		case x < 75:
			err = w.sync()
		case x < 80:
			w.setApplied()
		case x < 83:
			err = w.retention()
		case x < 93:
			err = w.crash(r.IntN(4) != 0)
		default:
			err = w.reopen()
		}
		if trace {
			fmt.Printf("op %d (%d): cur [%d,%d] hs %+v apply %d minLen %d states %d\n", op, x, w.cur.first, w.cur.last(), w.hs, w.apply, w.minLen, len(w.states))
		}
		if err != nil {
			return fmt.Errorf("op %d: %w", op, err)
		}
	}
	return w.crash(true)
}

func (w *crashWorld) markSynced() {
	w.states = []modelLog{w.cur.clone()}
	w.hss = []state{w.hs}
	w.minLen = w.cur.last()
	w.syncApp, w.maxApp = w.apply, w.apply
}

func (w *crashWorld) newEntry(index uint64) *pb.Entry {
	r := w.r
	switch x := r.IntN(10); {
	case x < 6:
		var bs [][]byte
		for range 1 + r.IntN(3) {
			n := 1 + r.IntN(5)
			body := r.IntN(200)
			if r.IntN(30) == 0 {
				body = 2000 + r.IntN(6000) // rolls, maybe bigger than a segment
			}
			b := kbatch(n, body, r.Int64N(1000))
			for i := batchfmt.HeaderSize; i < len(b); i++ {
				b[i] = byte(r.Uint32())
			}
			bs = append(bs, b)
		}
		return ent(index, w.term, userData(bs...))
	case x < 8:
		return ent(index, w.term, []byte{TagCommand, byte(r.Uint32()), byte(r.Uint32())})
	case x < 9:
		return &pb.Entry{Term: new(w.term), Index: new(index)}
	default:
		return &pb.Entry{Term: new(w.term), Index: new(index), Type: pb.EntryConfChangeV2.Enum(), Data: []byte{byte(r.Uint32())}}
	}
}

func (w *crashWorld) write(conflict bool) error {
	r := w.r
	at := w.cur.last() + 1
	if conflict {
		lo := max(w.cur.first, w.hs.commit+1)
		if lo > w.cur.last() {
			return nil
		}
		at = lo + uint64(r.Int64N(int64(w.cur.last()-lo+1)))
		w.term++
	} else if r.IntN(10) == 0 {
		w.term++
	}
	var ents []*pb.Entry
	for k := range 1 + r.IntN(5) {
		ents = append(ents, w.newEntry(at+uint64(k)))
	}
	var hs *pb.HardState
	nhs := w.hs
	if r.IntN(2) == 0 || w.term != w.hs.term {
		last := at + uint64(len(ents)) - 1
		nhs = state{term: w.term, vote: uint64(r.IntN(3)), commit: w.hs.commit}
		if r.IntN(2) == 0 && last > w.hs.commit {
			nhs.commit = w.hs.commit + uint64(r.Int64N(int64(last-w.hs.commit)+1))
		}
		hs = hardState(nhs.term, nhs.vote, nhs.commit)
	}
	if err := w.l.Write(ents, hs); err != nil {
		return fmt.Errorf("write at %d: %w", at, err)
	}
	w.hs = nhs
	w.cur.ents = append(w.cur.ents[:at-w.cur.first:at-w.cur.first], ents...)
	w.minLen = min(w.minLen, at-1)
	w.states = append(w.states, w.cur.clone())
	w.hss = append(w.hss, w.hs)
	w.maxApp = max(w.maxApp, w.apply)
	return nil
}

func (w *crashWorld) sync() error {
	s, err := w.l.Sync()
	if err != nil {
		return err
	}
	if s.LastIndex != w.cur.last() {
		return fmt.Errorf("Sync says %d, model %d", s.LastIndex, w.cur.last())
	}
	w.markSynced()
	return nil
}

func (w *crashWorld) setApplied() {
	if w.hs.commit > w.apply {
		w.apply += uint64(w.r.Int64N(int64(w.hs.commit-w.apply) + 1))
		w.l.SetApplied(w.apply)
		w.maxApp = max(w.maxApp, w.apply)
	}
}

func (w *crashWorld) retention() error {
	if w.apply < w.cur.first {
		return nil
	}
	idx := w.cur.first + uint64(w.r.Int64N(int64(w.apply-w.cur.first)+1))
	off, err := w.l.NextOffsetAt(idx)
	if err != nil {
		return err
	}
	if _, err := w.l.DeleteBefore(off); err != nil {
		return err
	}
	fi, _ := w.l.FirstIndex()
	if fi < w.cur.first {
		return fmt.Errorf("first index went back")
	}
	w.cur.ents = w.cur.ents[fi-w.cur.first:]
	w.cur.first = fi
	for i := range w.states {
		if w.states[i].first < fi {
			n := min(fi-w.states[i].first, uint64(len(w.states[i].ents)))
			w.states[i] = modelLog{first: fi, ents: w.states[i].ents[n:]}
		}
	}
	return nil
}

// reopen without a crash: nothing may be lost.
func (w *crashWorld) reopen() error {
	if err := w.l.Close(); err != nil {
		return err
	}
	var err error
	if w.l, err = Open(w.opts); err != nil {
		return err
	}
	// Close made nothing durable: the crash window stays as it was.
	if err := w.check(true); err != nil {
		return fmt.Errorf("after reopen: %w", err)
	}
	w.l.SetApplied(w.apply)
	return nil
}

func (w *crashWorld) crash(torn bool) error {
	if trace {
		names, _ := w.mem.List(w.opts.Dir)
		fmt.Println("before crash:", names)
	}
	if torn {
		w.mem.Crash(w.r)
	} else {
		w.mem.CrashClean()
	}
	var err error
	if w.l, err = Open(w.opts); err != nil {
		return fmt.Errorf("open after crash: %w", err)
	}
	if err := w.check(false); err != nil {
		return fmt.Errorf("after crash: %w", err)
	}
	// What survived is now the model, and durable (recovery syncs what it
	// changes; a crash leaves nothing pending).
	fi, _ := w.l.FirstIndex()
	li, _ := w.l.LastIndex()
	got, _ := w.l.Entries(fi, li+1, 1<<40)
	w.cur = modelLog{first: fi, ents: got}
	w.term = max(w.term, w.hs.term)
	for _, e := range got {
		w.term = max(w.term, e.GetTerm())
	}
	hs, _, _ := w.l.InitialState()
	w.hs = state{term: hs.GetTerm(), vote: hs.GetVote(), commit: hs.GetCommit()}
	w.apply = w.l.Applied()
	w.l.SetApplied(w.apply)
	w.markSynced()
	return nil
}

// unstamp returns e's data with every batch baseOffset zeroed.
func unstamp(e *pb.Entry) []byte {
	d := e.GetData()
	if len(d) == 0 || d[0] != TagUser || e.GetType() != pb.EntryNormal {
		return d
	}
	c := bytes.Clone(d)
	StampBatches(c[1:], 0, 0)
	for p := 1; p < len(c); {
		le := int(int32(be.Uint32(c[p+batchfmt.OffBatchLength:])))
		be.PutUint64(c[p:], 0)
		p += 12 + le
	}
	return c
}

func sameEntry(a, b *pb.Entry) bool {
	if a.GetIndex() != b.GetIndex() || a.GetTerm() != b.GetTerm() || a.GetType() != b.GetType() ||
		(a.Type == nil) != (b.Type == nil) || (a.Data == nil) != (b.Data == nil) {
		return false
	}
	return bytes.Equal(unstamp(a), unstamp(b))
}

// check compares the reopened log with the model: after a crash it must
// be a prefix of some state since the last sync, holding everything
// synced; after a clean reopen (exact) it must be the current state.
func (w *crashWorld) check(exact bool) error {
	l := w.l
	fi, _ := l.FirstIndex()
	li, _ := l.LastIndex()
	if fi != w.cur.first {
		return fmt.Errorf("first index %d, model %d", fi, w.cur.first)
	}
	if li < w.minLen {
		return fmt.Errorf("lost synced entries: last %d, synced %d", li, w.minLen)
	}
	got, err := l.Entries(fi, li+1, 1<<40)
	if err != nil && !(li < fi) {
		return fmt.Errorf("entries: %w", err)
	}
	ok := false
	states, hss := w.states, w.hss
	if exact {
		states, hss = []modelLog{w.cur}, []state{w.hs}
		if li != w.cur.last() {
			return fmt.Errorf("last index %d after reopen, model %d", li, w.cur.last())
		}
	}
	for t := len(states) - 1; t >= 0 && !ok; t-- {
		st := states[t]
		if st.first != fi || uint64(len(got)) > uint64(len(st.ents)) {
			continue
		}
		ok = true
		for i, e := range got {
			if !sameEntry(e, st.ents[i]) {
				ok = false
				break
			}
		}
	}
	if !ok {
		return fmt.Errorf("recovered log [%d, %d] is not a prefix of any state since the last sync", fi, li)
	}
	// Hard state: one that was written since the last sync, never ahead
	// of the entries.
	hs, _, _ := l.InitialState()
	hsOK := false
	for _, s := range hss {
		hsOK = hsOK || (s.term == hs.GetTerm() && s.vote == hs.GetVote() && s.commit == hs.GetCommit())
	}
	if !hsOK {
		return fmt.Errorf("hard state %v not among those written since the last sync", hs)
	}
	if hs.GetCommit() > li {
		return fmt.Errorf("commit %d beyond last index %d", hs.GetCommit(), li)
	}
	if a := l.Applied(); a < w.syncApp || a > w.maxApp {
		return fmt.Errorf("applied %d outside [%d, %d]", a, w.syncApp, w.maxApp)
	}
	// Offsets: dense, consistent with the entries, readable end to end.
	// The readable start is the replicated retention point, which may lie
	// inside the first stored segment; offsets are checked from the first
	// stored entry.
	start := l.StartOffset()
	next := int64(-1)
	users := 0
	for i, e := range got {
		base, n, err := l.EntryOffsets(fi + uint64(i))
		if err != nil {
			return err
		}
		if next == -1 {
			next = base
			if base > start {
				return fmt.Errorf("first stored entry at offset %d is past the start %d", base, start)
			}
		}
		if base != next {
			return fmt.Errorf("entry %d base %d, want %d", e.GetIndex(), base, next)
		}
		if d := e.GetData(); len(d) > 0 && d[0] == TagUser && e.GetType() == pb.EntryNormal {
			if n > start {
				users++ // readable: not wholly below the start
			}
			for _, b := range stampedBaseOffsets(d[1:]) {
				if b != next {
					return fmt.Errorf("entry %d batch stamped %d, want %d", e.GetIndex(), b, next)
				}
				break // later batches of the entry follow on
			}
		}
		next = n
	}
	if next == -1 {
		next = l.EndOffset()
	}
	if next != l.EndOffset() {
		return fmt.Errorf("end offset %d, entries say %d", l.EndOffset(), next)
	}
	if no, err := l.NextOffsetAt(li); err != nil || no != next {
		return fmt.Errorf("NextOffsetAt(last) = %d, %v; want %d", no, err, next)
	}
	var batches []Batch
	for off := l.StartOffset(); off < next; {
		b, err := l.Read(off, next, 1+w.r.IntN(4000))
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if len(b) == 0 {
			return fmt.Errorf("empty read at %d below %d", off, next)
		}
		batches = append(batches, b...)
		off = b[len(b)-1].NextOffset
	}
	if len(batches) != users {
		return fmt.Errorf("read %d user entries, log has %d", len(batches), users)
	}
	if _, err := l.Term(li); err != nil && !(li < fi && err == raft.ErrCompacted) {
		return fmt.Errorf("term of last: %w", err)
	}
	return nil
}

// A process that crashed leaves its unsynced writes in the page cache; the
// next Open finds them and raft takes them as stable, so Open must make
// them durable before a power loss can take them away.
func TestOpenMakesWhatItFindsDurable(t *testing.T) {
	mem := vfs.NewMem()
	l := openMem(t, memOpts(mem))
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1}}))
	require.NoError(t, l.Write([]*pb.Entry{userEnt(2, 1, 1, 10, 1)}, hardState(1, 1, 2)))
	_, err := l.Sync()
	require.NoError(t, err)
	require.NoError(t, l.Write([]*pb.Entry{userEnt(3, 1, 1, 10, 2), userEnt(4, 1, 1, 10, 3)}, hardState(2, 3, 2)))
	require.NoError(t, l.Close()) // the process dies: no sync, the page cache survives

	l = openMem(t, memOpts(mem))
	last, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(4), last, "the restarted process sees its predecessor's unsynced writes")
	require.NoError(t, l.Close())

	mem.CrashClean() // power loss: only durable bytes survive
	l = openMem(t, memOpts(mem))
	defer l.Close()
	last, err = l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(4), last, "what the restarted log held was reported stable to raft")
	hs, _, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(2), hs.GetTerm())
	require.Equal(t, uint64(3), hs.GetVote())
}
