package simulator

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/server"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// A canary is a deliberately broken variant of the production code that
// the checks must catch (internal/canary): a branch in the production code
// that only a build with the vdlcanary tag can switch on.

// Config describes one simulated run. Zero values take the defaults; the
// cluster shape and the fault personality are drawn from the seed.
type Config struct {
	Seed      uint64
	Nodes     int           // 3 or 5; 0: drawn from the seed
	DCs       int           // 1..3; 0: drawn from the seed
	Streams   int           // default 2 (the second one gets retention)
	Clients   int           // producing and fetching clients per stream, default 3
	Consumers int           // fetching-only clients per stream, default 1
	Safety    time.Duration // simulated length of the safety phase, default 12s
	Liveness  time.Duration // bound on recovery after healing, default 20s
	// WallLimit and MaxEvents are the watchdog's limits (watchdog.go):
	// defaults 60s and 5M; negative disables.
	WallLimit time.Duration
	MaxEvents int64
	Canary    canary.Name // needs a vdlcanary build
	// BitFlips switches the corruption faults on (opt-in): bit flips in
	// segment files and misdirected writes, on a minority of nodes chosen
	// from the seed. A node that detects corruption stops for good and the
	// rest of the cluster must stay safe and live.
	BitFlips bool
	// NoBuggify switches every BUGGIFY site off.
	NoBuggify bool
	// Weights override the nemesis weights by fault kind (0 disables).
	Weights map[string]int
	// Trace receives the readable trace; TraceEffects adds every core
	// effect to it (and to the trace hash).
	Trace        func(string)
	TraceEffects bool
	// OutDir, when set, receives the checker's report files on failure.
	OutDir string
}

// Result is the outcome of a run.
type Result struct {
	Seed     uint64
	Nodes    int
	DCs      int
	Canary   canary.Name
	OK       bool
	Failures []string
	// Caught names the checks that failed, in the order they first did.
	Caught    []check
	TraceHash string
	SimTime   time.Duration
	Wall      time.Duration
	Events    uint64
	Ops       int
	Faults    map[string]int
	Buggify   []string
	Check     *checker.Result
	// Detections counts the corruption a node detected (BitFlips), by
	// where: "open" (storage.Open returned ErrCorrupt), "panic" (raft
	// panicked on a storage read error wrapping ErrCorrupt), "read" (a
	// Kafka read failed its checks), "write", "snapshot-source",
	// "final-read" (the convergence read).
	Detections map[string]int
}

// Sim is one run's world.
type Sim struct {
	cfg         Config
	w           *world
	nodes       []*node
	groups      []uint64
	streams     []string
	segmentSize int64
	coreCfg     raftnode.Config
	kafkaCfg    kafka.Config
	tick        time.Duration
	lat         [][]time.Duration // one-way base latency per DC pair

	netR, nemR, wlR, dirR *rand.Rand

	cut       map[[2]uint64]int // raft links cut (from, to)
	clientCut map[uint64]int    // client links to a node cut
	clog      map[[2]uint64]time.Duration

	nextProp     raftnode.ProposalID
	rec          *checker.Recorder
	clients      []*client
	nextConn     int
	failures     []string
	caught       []check
	windows      []*window
	liveness     bool
	healAt       int64
	progress     map[string]bool
	demoted      map[uint64]uint64 // group -> learner the nemesis demoted
	replacing    *replacement      // a wiped server being replaced (replace.go)
	traceEffects bool
	corruptR     *rand.Rand // BitFlips: victims and positions
	detections   map[string]int
}

type window struct {
	fw   checker.FaultWindow
	done bool
	end  func()
}

// fail records a failure found by check c.
func (s *Sim) fail(c check, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.w.record("FAILURE [%s] %s", c, msg)
	if len(s.failures) < 20 {
		s.failures = append(s.failures, msg)
	}
	if !slices.Contains(s.caught, c) {
		s.caught = append(s.caught, c)
	}
}

func newSim(cfg Config) (*Sim, error) {
	w := newWorld(cfg.Seed, cfg.Trace)
	shape := w.stream("shape")
	if cfg.Nodes == 0 {
		cfg.Nodes = []int{3, 5}[shape.IntN(2)]
	}
	if cfg.DCs == 0 {
		cfg.DCs = 1 + shape.IntN(3)
	}
	cfg.DCs = min(cfg.DCs, cfg.Nodes)
	if cfg.Streams == 0 {
		cfg.Streams = 2
	}
	if cfg.Clients == 0 {
		cfg.Clients = 3
	}
	if cfg.Consumers == 0 {
		cfg.Consumers = 1
	}
	if cfg.Safety == 0 {
		cfg.Safety = 12 * time.Second
	}
	if cfg.Liveness == 0 {
		cfg.Liveness = 20 * time.Second
	}
	if cfg.WallLimit == 0 {
		cfg.WallLimit = defaultWallLimit
	}
	if cfg.WallLimit > 0 {
		w.deadline = time.Now().Add(cfg.WallLimit)
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = defaultMaxEvents
	}
	w.maxEvents = uint64(max(cfg.MaxEvents, 0))
	w.bug = newBuggify(w.stream("buggify"), !cfg.NoBuggify)
	s := &Sim{
		cfg: cfg, w: w, tick: 10 * time.Millisecond,
		netR: w.stream("network"), nemR: w.stream("nemesis"), wlR: w.stream("workload"), dirR: w.stream("dirs"),
		cut: map[[2]uint64]int{}, clientCut: map[uint64]int{}, clog: map[[2]uint64]time.Duration{},
		progress: map[string]bool{}, demoted: map[uint64]uint64{},
		traceEffects: cfg.TraceEffects, detections: map[string]int{},
	}
	s.rec = checker.NewRecorder(func() int64 { return s.w.now })
	for i := 0; i < cfg.Streams; i++ {
		s.groups = append(s.groups, uint64(i+1))
		s.streams = append(s.streams, fmt.Sprintf("s%d", i+1))
	}
	s.segmentSize = 16 << 10
	if w.bug.enabled("storage.tiny-segments") {
		s.segmentSize = 2 << 10
	}
	// Entries are bounded small, so oversized produces (BUGGIFY) are cheap.
	s.coreCfg = raftnode.Config{ElectionTick: 10, HeartbeatTick: 1, MaxEntryBytes: 64 << 10}
	s.kafkaCfg.MaxRecordSetBytes = int(s.coreCfg.MaxEntryBytes) - 1
	if w.bug.enabled("core.small-messages") {
		s.coreCfg.MaxSizePerMsg, s.coreCfg.MaxInflightMsgs = 300, 2
	}
	if w.bug.enabled("core.sync-writes") {
		s.coreCfg.SyncWrites = true
	}
	if w.bug.enabled("core.low-uncommitted") {
		s.coreCfg.MaxUncommittedBytes = 1 << 10
	}
	if w.bug.enabled("session.small-inflight") {
		s.kafkaCfg.MaxInFlightRequests = 2
	}
	// Latency: 50-500µs inside a DC, 2-40ms one way between DCs.
	s.lat = make([][]time.Duration, cfg.DCs)
	for i := range s.lat {
		s.lat[i] = make([]time.Duration, cfg.DCs)
	}
	for i := 0; i < cfg.DCs; i++ {
		s.lat[i][i] = durn(shape, 50*time.Microsecond, 500*time.Microsecond)
		for j := i + 1; j < cfg.DCs; j++ {
			d := durn(shape, 2*time.Millisecond, 40*time.Millisecond)
			s.lat[i][j], s.lat[j][i] = d, d
		}
	}
	var voters []uint64
	for i := 0; i < cfg.Nodes; i++ {
		id := uint64(i + 1)
		voters = append(voters, id)
		s.nodes = append(s.nodes, &node{s: s, id: id, dc: i % cfg.DCs, fs: vfs.NewMem(), dirID: s.dirR.Uint64() | 1,
			diskR: w.stream(fmt.Sprintf("disk-%d", id)), crashR: w.stream(fmt.Sprintf("crash-%d", id))})
	}
	// The founders met before their groups started: each knows every
	// other's data dir (server.hostWhenFoundersKnown).
	dirs := map[uint64]uint64{}
	for _, n := range s.nodes {
		dirs[n.id] = n.dirID
	}
	for _, n := range s.nodes {
		n.roster = server.NewRoster(dirs)
	}
	w.record("seed %d: %d nodes in %d DCs, streams %v, latency %v, buggify %v, canary %q",
		cfg.Seed, cfg.Nodes, cfg.DCs, s.streams, s.lat, w.bug.list(), cfg.Canary)
	if cfg.BitFlips {
		s.chooseVictims()
	}
	for _, n := range s.nodes {
		if err := n.bootstrap(voters); err != nil {
			return nil, err
		}
		if err := n.start(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Sim) node(id uint64) *node {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (s *Sim) restart(n *node) {
	if !n.down || n.quarantined {
		return
	}
	if s.cfg.BitFlips && n.victim && s.corruptR.IntN(2) == 0 {
		s.flipBit(n, "before restart")
	}
	s.w.record("restart n%d", n.id)
	// Raft reads entries from storage while the group starts: a panic
	// there (corruption found on that read) stops the process as it would
	// a real server.
	var err error
	s.w.runIn(n, func() { err = n.start() })
	if err == nil && n.down {
		return
	}
	if err != nil {
		n.stop(false)
		if errors.Is(err, storage.ErrCorrupt) {
			s.detect(n, "open", err)
			return
		}
		if !s.liveness && (errors.Is(err, vfs.ErrIO) || errors.Is(err, vfs.ErrNoSpace)) {
			// The injected disk fault is still there: stay down, try later.
			s.w.record("n%d cannot start yet: %v", n.id, err)
			s.w.after(500*time.Millisecond, nil, func() { s.restart(n) })
			return
		}
		s.fail(checkRestart, "%v", err)
	}
}

// --- network ---

func (s *Sim) linkLatency(a, b *node) time.Duration {
	base := s.lat[a.dc][b.dc]
	d := base + time.Duration(s.netR.Int64N(int64(base)/5+1)) + s.clog[[2]uint64{a.id, b.id}]
	if s.w.bug.fire(s.netR, "net.delay-spike", 0.02) {
		d += durn(s.netR, 20*time.Millisecond, 120*time.Millisecond)
	}
	return d
}

// sendRaft puts a raft message on the wire: it may be lost, duplicated,
// delayed (so reordered) or cut by a partition.
func (s *Sim) sendRaft(from *node, group uint64, m *raftpb.Message) {
	to := s.node(m.GetTo())
	if to == nil {
		return
	}
	// The transport reports what happened to a snapshot to the sender
	// (as raftnode/transport's SnapshotStatus does); an unreachable peer
	// is reported too.
	snap := m.GetType() == raftpb.MsgSnap
	delivered := false
	if snap {
		s.w.after(s.linkLatency(from, to)*2+time.Millisecond, from, func() {
			from.rn.ReportSnapshot(group, to.id, delivered)
			from.flush()
		})
	}
	// A peer with another data dir than the one known is told only
	// answers (server.Roster.Tells): the rest is dropped unreported.
	if !from.tells(to, m.GetType()) {
		return
	}
	if s.cut[[2]uint64{from.id, to.id}] > 0 || to.down {
		s.w.after(s.linkLatency(from, to), from, func() {
			from.rn.ReportUnreachable(group, to.id)
			from.flush()
		})
		return
	}
	if s.netR.Float64() < 0.002 && !snap {
		s.w.faults["net-loss"]++
		return
	}
	copies := 1
	if s.w.bug.fire(s.netR, "net.duplicate", 0.02) {
		copies = 2
		s.w.faults["net-duplicate"]++
	}
	for i := 0; i < copies; i++ {
		msg := cloneMsg(m)
		s.w.after(s.linkLatency(from, to), to, func() {
			if !to.hears(from, msg.GetType()) {
				return // a server with another data dir, not heard (server.Roster.Hears)
			}
			delivered = true
			to.rn.Step(group, msg)
			to.flush()
		})
	}
}

func (s *Sim) clientLatency(n *node) time.Duration {
	return s.lat[0][n.dc] + time.Duration(s.netR.Int64N(int64(50*time.Microsecond)))
}

// toClient sends response bytes over the connection, in order (TCP).
func (s *Sim) toClient(sc *sconn, data []byte) {
	c := sc.c
	if s.clientCut[sc.n.id] > 0 {
		sc.reset("network partition")
		return
	}
	t := max(s.w.now+int64(c.lat()), c.lastDown)
	c.lastDown = t
	s.w.at(t, nil, func() { c.receive(data) })
}

func (s *Sim) closeToClient(sc *sconn) {
	c := sc.c
	t := max(s.w.now+int64(c.lat()), c.lastDown)
	c.lastDown = t
	s.w.at(t, nil, func() { c.broken("closed by server") })
}

// --- nemesis ---

var defaultWeights = map[string]int{
	"partition": 3, "partition-oneway": 2, "isolate-node": 3, "isolate-dc": 2, "isolate-leader": 3, "clog": 2,
	"kill": 3, "power-loss": 3, "power-loss-dc": 1, "pause": 2,
	"disk-eio": 1, "disk-enospc": 1, "disk-slow": 2,
	"leader-transfer": 2, "membership": 1, "retention": 2, "wipe-disk": 1,
}

// corruptionWeights are the nemesis weights of the opt-in corruption
// faults (Config.BitFlips).
var corruptionWeights = map[string]int{"bitflip": 2, "misdirect": 1}

// FaultKinds lists the nemesis fault kinds (without the opt-in ones).
func FaultKinds() []string { return sortedKeys(defaultWeights) }

func (s *Sim) faultKinds() []string {
	kinds := FaultKinds()
	if s.cfg.BitFlips {
		kinds = append(kinds, sortedKeys(corruptionWeights)...)
	}
	return kinds
}

func (s *Sim) weight(kind string) int {
	if _, ok := corruptionWeights[kind]; ok && !s.cfg.BitFlips {
		return 0
	}
	if w, ok := s.cfg.Weights[kind]; ok {
		return w
	}
	if w, ok := corruptionWeights[kind]; ok {
		return w
	}
	return defaultWeights[kind]
}

// openWindow records a fault window ending after d with end.
func (s *Sim) openWindow(kind, detail string, d time.Duration, end func()) {
	s.w.fault(kind, "%s for %v", detail, d)
	win := &window{fw: checker.FaultWindow{Start: s.w.now, End: s.w.now + int64(d), Kind: kind, Detail: detail}, end: end}
	s.windows = append(s.windows, win)
	s.w.after(d, nil, func() { s.closeWindow(win) })
}

func (s *Sim) closeWindow(win *window) {
	if win.done {
		return
	}
	win.done = true
	win.fw.End = s.w.now
	if win.end != nil {
		win.end()
	}
	s.w.record("end of %s (%s)", win.fw.Kind, win.fw.Detail)
}

func (s *Sim) openWindows() int {
	k := 0
	for _, w := range s.windows {
		if !w.done {
			k++
		}
	}
	return k
}

func (s *Sim) nemesis() {
	if s.liveness {
		return
	}
	defer s.w.after(time.Duration(s.nemR.ExpFloat64()*float64(500*time.Millisecond)), nil, s.nemesis)
	if s.openWindows() >= 3 {
		return
	}
	kinds := s.faultKinds()
	total := 0
	for _, k := range kinds {
		total += s.weight(k)
	}
	if total == 0 {
		return
	}
	x := s.nemR.IntN(total)
	var kind string
	for _, k := range kinds {
		if x < s.weight(k) {
			kind = k
			break
		}
		x -= s.weight(k)
	}
	s.inject(kind)
}

func (s *Sim) pick() *node { return s.nodes[s.nemR.IntN(len(s.nodes))] }

func (s *Sim) cutLink(a, b uint64, d int) { s.cut[[2]uint64{a, b}] += d }

func (s *Sim) inject(kind string) {
	r := s.nemR
	d := durn(r, 200*time.Millisecond, 3*time.Second)
	switch kind {
	case "partition", "partition-oneway":
		a, b := s.pick(), s.pick()
		if a == b {
			return
		}
		oneway := kind == "partition-oneway"
		s.cutLink(a.id, b.id, 1)
		if !oneway {
			s.cutLink(b.id, a.id, 1)
		}
		s.openWindow(kind, fmt.Sprintf("n%d -/- n%d", a.id, b.id), d, func() {
			s.cutLink(a.id, b.id, -1)
			if !oneway {
				s.cutLink(b.id, a.id, -1)
			}
		})
	case "isolate-node", "isolate-dc":
		var in []*node
		if kind == "isolate-node" {
			in = []*node{s.pick()}
		} else {
			if s.cfg.DCs < 2 {
				return
			}
			dc := r.IntN(s.cfg.DCs)
			for _, n := range s.nodes {
				if n.dc == dc {
					in = append(in, n)
				}
			}
		}
		// Half the time clients still reach the cut-off servers (only the
		// replication network is partitioned): a deposed leader keeps
		// serving them until it notices.
		clients := r.IntN(2) == 0
		apply := func(delta int) {
			for _, a := range in {
				if clients {
					s.clientCut[a.id] += delta
				}
				for _, b := range s.nodes {
					if !slices.Contains(in, b) {
						s.cutLink(a.id, b.id, delta)
						s.cutLink(b.id, a.id, delta)
					}
				}
			}
		}
		apply(1)
		s.openWindow(kind, fmt.Sprintf("%s cut off (clients too: %v)", names(in), clients), d, func() { apply(-1) })
	case "isolate-leader":
		// A leader cut off from its peers but not from its clients: until
		// it notices, it must not serve what a new leader may have
		// overwritten (read fences).
		g := s.groups[r.IntN(len(s.groups))]
		l := s.leader(g)
		if l == nil {
			return
		}
		// Its clock runs 5-20x slow meanwhile (a starved timer, a paused
		// VM's clock catching up): raft's own timeouts (CheckQuorum) take
		// that much longer to depose it, and only a read fence stands
		// between its clients and a stale read.
		slow := 5 + r.IntN(16)
		apply := func(delta int) {
			for _, b := range s.nodes {
				if b != l {
					s.cutLink(l.id, b.id, delta)
					s.cutLink(b.id, l.id, delta)
				}
			}
		}
		apply(1)
		l.slowClock = slow
		s.openWindow(kind, fmt.Sprintf("n%d (leader of g%d) cut off from its peers, not from clients; its clock %dx slow", l.id, g, slow), d, func() {
			apply(-1)
			l.slowClock = 0
		})
	case "clog":
		a, b := s.pick(), s.pick()
		if a == b {
			return
		}
		k := [2]uint64{a.id, b.id}
		if s.clog[k] > 0 {
			return
		}
		s.clog[k] = durn(r, 50*time.Millisecond, 500*time.Millisecond)
		s.openWindow(kind, fmt.Sprintf("n%d -> n%d +%v", a.id, b.id, s.clog[k]), d, func() { delete(s.clog, k) })
	case "kill", "power-loss", "power-loss-dc":
		in := []*node{s.pick()}
		if kind == "power-loss-dc" {
			dc := r.IntN(s.cfg.DCs)
			in = nil
			for _, n := range s.nodes {
				if n.dc == dc {
					in = append(in, n)
				}
			}
		}
		var killed []*node
		for _, n := range in {
			if !n.down {
				n.stop(kind != "kill")
				killed = append(killed, n)
			}
		}
		if len(killed) == 0 {
			return
		}
		s.openWindow(kind, names(killed)+" down", d, func() {
			for _, n := range killed {
				s.restart(n)
			}
		})
	case "wipe-disk":
		n := s.pick()
		if s.replacing != nil || s.cfg.BitFlips || n.down || !s.survivesLoss(n) {
			return
		}
		for g, id := range s.demoted {
			if id == n.id {
				delete(s.demoted, g) // the replacement promotes it
			}
		}
		s.wipe(n, d)
	case "pause":
		n := s.pick()
		if n.down || n.paused {
			return
		}
		n.paused = true
		s.openWindow(kind, fmt.Sprintf("n%d paused", n.id), d, func() { s.resume(n) })
	case "disk-eio":
		n := s.pick()
		f := vfs.Faults{FailSyncs: 1}
		if r.IntN(2) == 0 {
			f = vfs.Faults{FailWrites: 1}
		}
		n.fs.SetFaults(f)
		s.openWindow(kind, fmt.Sprintf("n%d next %s fails with EIO", n.id, map[bool]string{true: "fsync", false: "write"}[f.FailSyncs > 0]), d, func() { n.fs.SetFaults(vfs.Faults{}) })
	case "disk-enospc":
		// The disk fills to a few KiB of room. Half the time it stays full
		// (across restarts, until the heal; retention frees some of it),
		// else an operator adds space when the window ends.
		n := s.pick()
		n.fs.SetCapacity(memUsed(n.fs, "/") + r.Int64N(64<<10))
		if r.IntN(2) == 0 {
			s.openWindow(kind, fmt.Sprintf("n%d disk full until the heal", n.id), d, nil)
			return
		}
		s.openWindow(kind, fmt.Sprintf("n%d disk full", n.id), d, func() { n.fs.SetCapacity(0) })
	case "disk-slow":
		n := s.pick()
		n.slowTill = s.w.now + int64(d)
		s.openWindow(kind, fmt.Sprintf("n%d fsyncs slow", n.id), d, nil)
	case "leader-transfer":
		g := s.groups[r.IntN(len(s.groups))]
		l := s.leader(g)
		to := s.pick()
		if l == nil || to == l {
			return
		}
		s.w.fault(kind, "g%d n%d -> n%d", g, l.id, to.id)
		s.w.runIn(l, func() {
			l.rn.TransferLeader(g, to.id)
			l.flush()
		})
	case "membership":
		if s.replacing != nil {
			return // one membership operation at a time
		}
		g := s.groups[r.IntN(len(s.groups))]
		l := s.leader(g)
		if l == nil {
			return
		}
		if lr, ok := s.demoted[g]; ok {
			s.w.fault(kind, "g%d promote n%d back", g, lr)
			s.changeMember(l, g, lr, raftpb.ConfChangeAddNode)
			return
		}
		st, _ := l.rn.Status(g)
		if len(st.Learners) > 0 || len(st.Voters) < 3 {
			return
		}
		v := st.Voters[r.IntN(len(st.Voters))]
		if s.cfg.BitFlips {
			// Only corruption victims are demoted: with a victim stopped
			// for good, a demoted healthy voter could leave no quorum.
			var vs []uint64
			for _, id := range st.Voters {
				if n := s.node(id); n != nil && n.victim {
					vs = append(vs, id)
				}
			}
			if len(vs) == 0 {
				return
			}
			v = vs[s.corruptR.IntN(len(vs))]
		}
		s.w.fault(kind, "g%d demote n%d to learner", g, v)
		s.demoted[g] = v
		s.changeMember(l, g, v, raftpb.ConfChangeAddLearnerNode)
	case "bitflip", "misdirect":
		var vs []*node
		for _, n := range s.nodes {
			if n.victim && !n.quarantined {
				vs = append(vs, n)
			}
		}
		if len(vs) == 0 {
			return
		}
		n := vs[s.corruptR.IntN(len(vs))]
		if kind == "bitflip" {
			s.flipBit(n, map[bool]string{true: "stopped", false: "live"}[n.down])
			return
		}
		shift := int64(8 * (1 + s.corruptR.IntN(512)))
		if s.corruptR.IntN(2) == 0 {
			shift = -shift
		}
		n.fs.Misdirect(n.dir()+"/", shift)
		n.corrupted = true
		s.corruptionWindow(kind, fmt.Sprintf("n%d next write lands %+d bytes off", n.id, shift))
	case "retention":
		if len(s.groups) < 2 {
			return
		}
		g := s.groups[1] // only the second stream: the first keeps a complete final read
		l := s.leader(g)
		if l == nil || !l.readable(g) || l.grp[g].HighWatermark == 0 {
			return
		}
		// An operator's retention request (POST /streams/s2/retain) at 3/4
		// of the high watermark, just below it, at it, or above it: those
		// above must be refused, the others accepted.
		hwm := l.grp[g].HighWatermark
		before := []int64{hwm * 3 / 4, hwm - 1, hwm, hwm + 1, hwm + 1 + r.Int64N(200)}[r.IntN(5)]
		s.w.fault(kind, "g%d delete before %d (n%d hwm %d)", g, before, l.id, hwm)
		s.w.runIn(l, func() {
			l.backend.Retain(s.streams[1], before, func(err error) { s.retained(l, g, before, hwm, err) })
			l.flush()
		})
	}
}

// powerLossSoon cuts n's power within 2 ms (BUGGIFY, right after it
// promised raft something) and restarts it later.
func (s *Sim) powerLossSoon(n *node, why string) {
	r := s.nemR
	s.w.after(durn(n.crashR, 0, 2*time.Millisecond), nil, func() {
		if n.down || s.liveness {
			return
		}
		n.stop(true)
		s.openWindow("power-loss", fmt.Sprintf("n%d down right after it %s", n.id, why), durn(r, 100*time.Millisecond, time.Second), func() { s.restart(n) })
	})
}

// retained checks the outcome of a retention request made at high
// watermark hwm.
func (s *Sim) retained(l *node, g uint64, before, hwm int64, err error) {
	s.w.record("n%d retention of g%d before %d: %v", l.id, g, before, err)
	switch refused := errors.Is(err, kafka.ErrRetainAboveHWM); {
	case before > hwm && err == nil:
		s.fail(checkRetention, "n%d accepted a retention before %d, above its high watermark %d", l.id, before, hwm)
	case before <= hwm && refused:
		s.fail(checkRetention, "n%d refused a retention before %d, at or below its high watermark %d: %v", l.id, before, hwm, err)
	}
}

// checkLogStart: a readable leader's log never starts above its high watermark
// (retention deletes only committed records).
func (n *node) checkLogStart() {
	for _, g := range n.s.groups {
		v, l := n.grp[g], n.logs[g]
		if v == nil || l == nil || !v.Readable(n.id) {
			continue // the view's high watermark is current only on a readable leader
		}
		if start := l.StartOffset(); start > v.HighWatermark {
			n.s.fail(checkRetention, "n%d g%d: the log starts at %d, above the high watermark %d", n.id, g, start, v.HighWatermark)
		}
	}
}

// survivesLoss reports whether every group keeps a quorum of voters
// without n (an operator replaces a disk only then: without one, the group
// is unavailable until the lost server's data comes back).
func (s *Sim) survivesLoss(n *node) bool {
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil {
			return false
		}
		st, _ := l.rn.Status(g)
		// A voter the nemesis is demoting may be a learner any moment.
		demoted, ok := s.demoted[g]
		rest := slices.DeleteFunc(slices.Clone(st.Voters), func(id uint64) bool { return id == n.id || (ok && id == demoted) })
		if len(rest) < len(st.Voters)/2+1 {
			return false
		}
	}
	return true
}

// simRetention is the second stream's retention policy (the first keeps
// everything, for the final complete read): records older than 4 s of
// simulated time, and beyond the newest 24 KiB, go.
var simRetention = storage.RetentionPolicy{MaxAge: 4000, MaxBytes: 24 << 10}

// retentionPolicies is the leader's periodic retention check, as the
// server's (server.RetentionDue): record timestamps are simulated ms.
func (s *Sim) retentionPolicies() {
	if s.liveness {
		return // the final read must see what the stream held at the heal
	}
	defer s.w.after(time.Second, nil, s.retentionPolicies)
	if len(s.groups) < 2 {
		return
	}
	g := s.groups[1]
	l := s.leader(g)
	if l == nil || !l.readable(g) {
		return
	}
	data, before, ok := server.RetentionDue(l.logs[g], simRetention, s.w.now/1e6, l.grp[g].HighWatermark)
	if !ok {
		return
	}
	s.w.faults["retention-policy"]++
	s.w.record("n%d retention policy of g%d: before %d", l.id, g, before)
	s.w.runIn(l, func() {
		l.propose(g, data, func(raftnode.Result, error) {})
		l.flush()
	})
}

func (s *Sim) changeMember(l *node, g, id uint64, t raftpb.ConfChangeType) {
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}}
	s.w.runIn(l, func() {
		l.proposeConfChange(g, cc, func(err error) {
			s.w.record("conf change g%d %v n%d: %v", g, t, id, err)
		})
	})
}

func (s *Sim) resume(n *node) {
	if !n.paused {
		return
	}
	n.paused = false
	held := n.held
	n.held = nil
	s.w.record("resume n%d (%d held events)", n.id, len(held))
	for _, e := range held {
		s.w.seq++
		e.at, e.seq = s.w.now, s.w.seq
		heap.Push(&s.w.q, e)
	}
}

func names(ns []*node) string {
	var b []string
	for _, n := range ns {
		b = append(b, fmt.Sprintf("n%d", n.id))
	}
	return strings.Join(b, ",")
}

// leader returns the up node that leads g with the highest term.
func (s *Sim) leader(g uint64) *node {
	var best *node
	var term uint64
	for _, n := range s.nodes {
		if n.down || n.paused {
			continue
		}
		if v := n.grp[g]; v.Leader == n.id && v.Role == "StateLeader" && v.Term >= term {
			best, term = n, v.Term
		}
	}
	return best
}

// heal ends every fault: the liveness phase starts from a healthy cluster.
func (s *Sim) heal() {
	// Disk faults first: closing a window may restart a process.
	for _, n := range s.nodes {
		n.fs.SetFaults(vfs.Faults{})
		n.fs.SetCapacity(0)
		n.slowTill = 0
	}
	for _, w := range s.windows {
		s.closeWindow(w)
	}
	s.cut = map[[2]uint64]int{}
	s.clientCut = map[uint64]int{}
	s.clog = map[[2]uint64]time.Duration{}
	for _, n := range s.nodes {
		if n.paused {
			s.resume(n)
		}
		if n.down {
			s.restart(n)
		}
	}
	s.w.record("HEAL: liveness phase")
}

// Run runs one simulation and checks it.
func Run(cfg Config) (res *Result) {
	start := time.Now()
	res = &Result{Seed: cfg.Seed, Canary: cfg.Canary}
	var s *Sim
	defer func() {
		if p := recover(); p != nil {
			if a, ok := p.(watchdogAbort); ok && s != nil {
				s.w.record("WATCHDOG %s", a.why)
				replay := fmt.Sprintf("make sim SEED=%d", cfg.Seed)
				if cfg.Canary != canary.None {
					replay += " CANARY=" + string(cfg.Canary)
				}
				res.Failures = append(s.failures, fmt.Sprintf("watchdog: %s; replay: %s; state:%s", a.why, replay, s.state()))
				res.Caught = append(s.caught, checkWatchdog)
			} else {
				res.Failures = append(res.Failures, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
				res.Caught = append(res.Caught, checkPanic)
			}
			res.OK = false
		}
		if s != nil {
			res.Nodes, res.DCs = s.cfg.Nodes, s.cfg.DCs
			res.TraceHash = s.w.traceHash()
			res.SimTime = time.Duration(s.w.now)
			res.Events = s.w.events
			res.Faults = s.w.faults
			res.Buggify = s.w.bug.list()
		}
		res.Wall = time.Since(start)
	}()
	if cfg.Canary != canary.None {
		canary.Set(cfg.Canary)
		defer canary.Set(canary.None)
	}
	s, err := newSim(cfg)
	if err != nil {
		res.Failures = append(res.Failures, "setup: "+err.Error())
		return res
	}
	s.run(res)
	return res
}

func (s *Sim) run(res *Result) {
	w := s.w
	for i, st := range s.streams {
		for k := 0; k < s.cfg.Clients+s.cfg.Consumers; k++ {
			c := s.newClient(len(s.clients), st, false)
			c.consumer = k >= s.cfg.Clients
			s.clients = append(s.clients, c)
			w.after(time.Duration(i*k)*time.Millisecond, nil, c.loop)
		}
	}
	w.after(300*time.Millisecond, nil, s.nemesis)
	w.after(0, nil, s.handshakes)
	w.after(time.Second, nil, s.retentionPolicies)
	w.run(int64(s.cfg.Safety))

	// Liveness: heal everything; the cluster must make progress and converge.
	s.liveness = true
	s.heal()
	s.healAt = w.now
	// A node stopped for good after detecting corruption leaves a smaller
	// quorum margin (slow personalities catch up much more slowly): the
	// bound doubles then.
	deadline := func() int64 {
		if slices.ContainsFunc(s.nodes, func(n *node) bool { return n.quarantined }) {
			return s.healAt + 2*int64(s.cfg.Liveness)
		}
		return s.healAt + int64(s.cfg.Liveness)
	}
	s.w.after(0, nil, s.repairMembership)
	for w.now < deadline() && !s.progressed() {
		w.run(w.now + int64(100*time.Millisecond))
	}
	if !s.progressed() {
		s.fail(checkLiveness, "liveness: no acknowledged produce on every stream within %v of healing (progress %v)", time.Duration(deadline()-s.healAt), s.progress)
	}
	for _, c := range s.clients {
		c.stopped = true
	}
	for i := 0; i < 40 && s.busyClients(); i++ {
		w.run(w.now + int64(100*time.Millisecond))
	}
	for _, c := range s.clients {
		c.abandon("workload stopped")
	}
	for w.now < deadline() && s.divergence() != "" {
		w.run(w.now + int64(100*time.Millisecond))
	}
	if d := s.divergence(); d != "" {
		s.fail(checkLiveness, "liveness: replicas did not converge within %v of healing: %s", time.Duration(deadline()-s.healAt), d)
	}

	// Final read of every stream through the Kafka path.
	finals := map[string]*client{}
	for _, st := range s.streams {
		c := s.newClient(len(s.clients), st, true)
		s.clients = append(s.clients, c)
		finals[st] = c
		w.after(0, nil, c.loop)
	}
	end := w.now + int64(10*time.Second)
	for w.now < end {
		done := true
		for _, c := range finals {
			done = done && c.finalDone
		}
		if done {
			break
		}
		w.run(w.now + int64(50*time.Millisecond))
	}
	for _, st := range s.streams {
		if !finals[st].finalDone {
			s.fail(checkFinalRead, "final read of %s did not complete", st)
		}
		finals[st].stopped = true
		finals[st].abandon("end")
	}

	hist := s.rec.History()
	res.Ops = len(hist)
	opts := checker.Options{Timeout: 30 * time.Second, Replicas: s.replicas(), Parallelism: 1}
	for _, win := range s.windows {
		opts.Faults = append(opts.Faults, win.fw)
	}
	res.Check = checker.Check(hist, opts)
	if !res.Check.OK && s.cfg.OutDir != "" {
		opts.OutDir = s.cfg.OutDir
		checker.Check(hist, opts)
	}
	for _, sr := range res.Check.Streams {
		for _, f := range sr.Failures {
			s.fail(checkerCheck(sr, f), "checker: stream %s: %s", sr.Stream, f)
		}
	}
	for _, e := range res.Check.Errors {
		s.fail(checkHistory, "checker: malformed history: %s", e)
	}
	if res.Check.Ordering.Count > 0 {
		for _, k := range sortedKeys(res.Check.OrderingKinds) {
			s.fail(check("ordering:"+string(k)), "checker: ordering: %d %s violations", res.Check.OrderingKinds[k], k)
		}
		for _, v := range res.Check.Ordering.Examples {
			s.w.record("ordering violation: %s conn %d: %s", v.Kind, v.Conn, v.Detail)
			s.failures = append(s.failures, fmt.Sprintf("checker: ordering: %s conn %d: %s", v.Kind, v.Conn, v.Detail))
		}
	}
	res.Failures = s.failures
	res.Caught = s.caught
	res.OK = len(s.failures) == 0
	res.Detections = s.detections
	w.record("END ok=%v ops=%d", res.OK, res.Ops)
}

func (s *Sim) progressed() bool {
	for _, st := range s.streams {
		if !s.progress[st] {
			return false
		}
	}
	return true
}

func (s *Sim) busyClients() bool {
	for _, c := range s.clients {
		if c.conn != nil && len(c.conn.inflight) > 0 {
			return true
		}
	}
	return false
}

// repairMembership promotes learners back to voters during liveness.
func (s *Sim) repairMembership() {
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil {
			continue
		}
		st, _ := l.rn.Status(g)
		for _, id := range st.Learners {
			if r := s.replacing; r != nil && r.n.id == id {
				continue // the replacement promotes it once caught up
			}
			s.changeMember(l, g, id, raftpb.ConfChangeAddNode)
			break
		}
	}
	s.w.after(300*time.Millisecond, nil, s.repairMembership)
}

// divergence describes why the cluster has not converged ("" when it has):
// every group has a readable leader with no learners, and every node
// applied up to the same high watermark.
func (s *Sim) divergence() string {
	if r := s.replacementState(); r != "" {
		return r
	}
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil || !l.readable(g) {
			return fmt.Sprintf("group %d has no readable leader", g)
		}
		st, _ := l.rn.Status(g)
		if len(st.Learners) > 0 {
			return fmt.Sprintf("group %d still has learners %v", g, st.Learners)
		}
		for _, n := range s.nodes {
			if n.quarantined {
				continue // detected corruption: stopped for good
			}
			if n.down {
				return fmt.Sprintf("n%d is down", n.id)
			}
			if n.grp[g].HighWatermark != l.grp[g].HighWatermark {
				return fmt.Sprintf("group %d: n%d hwm %d, leader n%d hwm %d", g, n.id, n.grp[g].HighWatermark, l.id, l.grp[g].HighWatermark)
			}
		}
	}
	return ""
}

// replicas reads every replica's committed records for the convergence check.
func (s *Sim) replicas() map[string]map[string][]checker.ReplicaRecord {
	out := map[string]map[string][]checker.ReplicaRecord{}
	for i, st := range s.streams {
		g := s.groups[i]
		out[st] = map[string][]checker.ReplicaRecord{}
		for _, n := range s.nodes {
			if n.down {
				continue
			}
			l := n.logs[g]
			var recs []checker.ReplicaRecord
			off, hwm := l.StartOffset(), n.grp[g].HighWatermark
			for off < hwm {
				bs, err := l.Read(off, hwm, math.MaxInt32)
				if err != nil && errors.Is(err, storage.ErrCorrupt) && n.corrupted {
					s.detections["final-read"]++
					s.w.record("CORRUPTION DETECTED n%d (final-read): %v", n.id, err)
					recs = nil
					break
				}
				if err != nil || len(bs) == 0 {
					s.fail(checkReplicaRead, "n%d %s: read [%d,%d): %v", n.id, st, off, hwm, err)
					break
				}
				for _, b := range bs {
					for _, r := range decodeRecords(b.Data) {
						if r.Offset >= off && r.Offset < hwm {
							recs = append(recs, checker.ReplicaRecord{Offset: r.Offset, Bytes: []byte(r.Value)})
						}
					}
				}
				off = bs[len(bs)-1].NextOffset
			}
			out[st][fmt.Sprintf("n%d", n.id)] = recs
		}
	}
	return out
}
