package simulator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

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
	// NoQuiesce runs the servers without idle-group quiescence (as
	// [raft] quiesce = false; on by default, as on a server).
	NoQuiesce bool
	// ControlPlane runs simulated config servers (controlplane.go):
	// streams created and deleted during the run on some of the servers,
	// replica moves, the preferred-DC balancer, config server leader loss.
	ControlPlane bool
	// cpBreak breaks the control plane on purpose (tests of its checks):
	// "balancer" (no transfers), "removal" (deleted and moved-away
	// groups' data stays), "found-with-replicas" (a founder bootstraps
	// with the current replicas, as servers did before Stream.Founders),
	// "orphans" (a cancelled move's target left a member), "move-back"
	// (moves may take a stream back to a server it left), "release-early"
	// (a former replica is released as soon as its copy is gone, whatever
	// the replicas' memberships).
	cpBreak string
	// noHello runs the servers' groups without their hello on start, to
	// replay a seed on the course it took when it was recorded.
	noHello bool
	// syncPerJob times a sync job as one fsync whatever its logs (the
	// disk model before it charged per raftnode.ConcurrentSyncs logs), to
	// replay a seed on the course it took when it was recorded.
	syncPerJob bool
	// modelBefore1203 replays a seed on the course it took before 3
	// December: peers admitted at every message (no raft streams,
	// links.go), a produce's outcome reaching its session at once (no
	// hop, conn.go), no client.large-values, and raft messages as
	// datagrams, each on its own latency (network.go, inOrder).
	modelBefore1203 bool
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
	// ControlPlane counts what the control plane did (Config.ControlPlane).
	ControlPlane map[string]int
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
	queueR                *rand.Rand // the transport's queue across reconnections (queue.go)
	hopR                  *rand.Rand // the hop of a produce's outcome to its connection's loop (conn.go)

	cut       map[[2]uint64]int // raft links cut (from, to)
	clientCut map[uint64]int    // client links to a node cut
	clog      map[[2]uint64]time.Duration
	// lastOnLink is when the last message sent on each raft stream
	// (from, to) arrives: the next one arrives after it (inOrder).
	lastOnLink map[[2]uint64]int64

	nextProp raftnode.ProposalID
	rec      *checker.Recorder
	clients  []*client
	nextConn int
	failures []string
	caught   []check
	windows  []*window
	liveness bool
	healAt   int64
	progress map[string]bool
	// workloadDone: the workload stopped before the final read; a stream
	// created after that gets no clients (seed 131 -sim.controlplane: a
	// create completing then started clients that wrote on through the
	// final read, and the checker found their writes unseen).
	workloadDone bool
	demoted      map[uint64]uint64 // group -> learner the nemesis demoted
	replacing    *replacement      // a wiped server being replaced (replace.go)
	traceEffects bool
	corruptR     *rand.Rand    // BitFlips: victims and positions
	cp           *controlPlane // Config.ControlPlane
	detections   map[string]int
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

// newSim builds a run's world from cfg and starts its servers. The order
// of the steps is the order of the random draws: keep it.
func newSim(cfg Config) (*Sim, error) {
	w := newWorld(cfg.Seed, cfg.Trace)
	shape := w.stream("shape")
	cfg = cfg.withDefaults(shape)
	if cfg.WallLimit > 0 {
		w.deadline = time.Now().Add(cfg.WallLimit)
	}
	w.maxEvents = uint64(max(cfg.MaxEvents, 0))
	w.bug = newBuggify(w.stream("buggify"), !cfg.NoBuggify)
	s := &Sim{
		cfg: cfg, w: w, tick: 10 * time.Millisecond,
		netR: w.stream("network"), nemR: w.stream("nemesis"), wlR: w.stream("workload"), dirR: w.stream("dirs"), queueR: w.stream("transport-queue"), hopR: w.stream("completion-hop"),
		cut: map[[2]uint64]int{}, clientCut: map[uint64]int{}, clog: map[[2]uint64]time.Duration{}, lastOnLink: map[[2]uint64]int64{},
		progress: map[string]bool{}, demoted: map[uint64]uint64{},
		traceEffects: cfg.TraceEffects, detections: map[string]int{},
	}
	s.rec = checker.NewRecorder(func() int64 { return s.w.now })
	for i := 0; i < cfg.Streams; i++ {
		s.groups = append(s.groups, uint64(i+1))
		s.streams = append(s.streams, fmt.Sprintf("s%d", i+1))
	}
	if cfg.ControlPlane {
		s.cp = newControlPlane(s)
	}
	s.buggifyConfigs()
	s.lat = latencies(shape, cfg.DCs)
	voters := s.newNodes()
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

// withDefaults fills in cfg's zero values, drawing the cluster's shape
// (servers, then DCs) from shape.
func (cfg Config) withDefaults(shape *rand.Rand) Config {
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
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = defaultMaxEvents
	}
	return cfg
}

// buggifyConfigs applies the BUGGIFY sites that shape the storage, core
// and session configurations.
func (s *Sim) buggifyConfigs() {
	w := s.w
	s.segmentSize = 16 << 10
	if w.bug.enabled("storage.tiny-segments") {
		s.segmentSize = 2 << 10
	}
	// Entries are bounded small, so oversized produces (BUGGIFY) are cheap.
	s.coreCfg = raftnode.Config{NoQuiesce: s.cfg.NoQuiesce, NoHello: s.cfg.noHello, ElectionTick: 10, HeartbeatTick: 1, MaxEntryBytes: 64 << 10,
		// Producer states are saved every few KiB, as a production server
		// saves them every 64 MiB: restarts load a saved state and replay
		// the log after it, snapshots ship one.
		ProducerSaveBytes: 8 << 10}
	s.kafkaCfg.MaxRecordSetBytes = int(s.coreCfg.MaxEntryBytes) - 1
	if s.cfg.ControlPlane {
		// Moves' learners catch up paced ([moves] catchup_bytes_per_sec):
		// 4 KiB a 10 ms tick.
		s.coreCfg.LearnerBytesPerTick = 4 << 10
	}
	if w.bug.enabled("core.small-messages") {
		s.coreCfg.MaxSizePerMsg, s.coreCfg.MaxInflightMsgs = 300, 2
	}
	if w.bug.enabled("core.sync-writes") {
		s.coreCfg.SyncWrites = true
	}
	if w.bug.enabled("core.one-campaign") {
		s.coreCfg.MaxCampaigns = 1
	}
	if w.bug.enabled("core.low-uncommitted") {
		s.coreCfg.MaxUncommittedBytes = 1 << 10
	}
	if w.bug.enabled("session.small-inflight") {
		s.kafkaCfg.MaxInFlightRequests = 2
	}
}

// latencies draws the one-way base latency of every DC pair: 50-500µs
// inside a DC, 2-40ms between DCs.
func latencies(shape *rand.Rand, dcs int) [][]time.Duration {
	lat := make([][]time.Duration, dcs)
	for i := range lat {
		lat[i] = make([]time.Duration, dcs)
	}
	for i := 0; i < dcs; i++ {
		lat[i][i] = durn(shape, 50*time.Microsecond, 500*time.Microsecond)
		for j := i + 1; j < dcs; j++ {
			d := durn(shape, 2*time.Millisecond, 40*time.Millisecond)
			lat[i][j], lat[j][i] = d, d
		}
	}
	return lat
}

// newNodes creates the founding servers, each knowing every other's data
// dir, and returns their ids (the voters of every group).
func (s *Sim) newNodes() []uint64 {
	w, cfg := s.w, s.cfg
	var voters []uint64
	for i := 0; i < cfg.Nodes; i++ {
		id := uint64(i + 1)
		voters = append(voters, id)
		n := &node{s: s, id: id, dc: i % cfg.DCs, dirID: s.dirR.Uint64() | 1,
			diskR: w.stream(fmt.Sprintf("disk-%d", id)), crashR: w.stream(fmt.Sprintf("crash-%d", id))}
		n.setDisk(vfs.NewMem())
		s.nodes = append(s.nodes, n)
	}
	// The founders met before their groups started: each knows every
	// other's data dir, as it presented it (server.hostWhenFoundersKnown).
	dirs := map[uint64]uint64{}
	var ids []uint64
	for _, n := range s.nodes {
		dirs[n.id] = n.dirID
		ids = append(ids, n.id)
	}
	for _, n := range s.nodes {
		n.roster = server.NewRoster(dirs, ids)
	}
	return voters
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

// run runs the phases of a run in turn and fills res with the outcome.
func (s *Sim) run(res *Result) {
	s.safetyPhase()
	s.livenessPhase()
	s.finalRead()
	s.checkRun(res)
	res.Failures = s.failures
	res.Caught = s.caught
	res.OK = len(s.failures) == 0
	res.Detections = s.detections
	if s.cp != nil {
		res.ControlPlane = s.cp.summary()
		s.w.record("control plane: %v; streams%s", res.ControlPlane, s.cp)
	}
	s.w.record("END ok=%v ops=%d", res.OK, res.Ops)
}
