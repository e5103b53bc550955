// Package memcluster is a step-by-step driver of raftnode's engine: whole
// clusters of servers, each a raftnode.Node (the Core with the production
// storage pipeline, snapshot installs and fail-stop — the engine the Host
// and the simulator run too) with its Raft groups on the real storage
// engine over an in-memory disk (vfs.Mem), connected by an in-memory
// network, all on one goroutine. The driver only carries the engine's jobs
// out, one step at a time. Every choice (message order, loss, when disks finish
// writing, ticks) is drawn from seeded streams, so a seed replays a run
// exactly; the trace hash proves it. The simulator grows from this.
package memcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/rng"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// Config describes a cluster.
type Config struct {
	Seed        uint64
	Nodes       []uint64 // node ids; all are voters of every group at bootstrap
	Groups      []uint64 // group ids
	SegmentSize int64    // default 1 MiB (small, so tests roll segments)
	SyncWrites  bool
	// DropRate is the probability a message is lost; Delay is the
	// probability a message waits another step.
	DropRate float64
	Delay    float64
	// DiskDelay is the probability a node's pending disk work waits another step.
	DiskDelay float64
	// SyncLogsPerStep, when > 0, makes a sync job cost its fsyncs: a job
	// syncing n logs keeps the node's disk busy for n/SyncLogsPerStep
	// steps (rounded up) after it, as a server's syncer takes an fsync's
	// time per few logs (a vote each, when thousands of groups elect).
	SyncLogsPerStep int
	// TickEvery steps, every node ticks once (default 3).
	TickEvery int
	Core      raftnode.Config
	// OnMembership, when set, sees what each node's engine tells of the
	// memberships its groups apply or install (raftnode.NodeConfig).
	OnMembership func(node, group uint64, cs *raftpb.ConfState, context []byte)
}

// Cluster is a deterministic in-memory cluster.
type Cluster struct {
	cfg   Config
	net   *rand.Rand
	disk  *rand.Rand
	nodes []*Node
	wire  []envelope
	cut   map[[2]uint64]bool // one-way links that drop everything
	steps int
	trace hash.Hash
	// Results of proposals by id, as completed on the proposing node.
	Results map[raftnode.ProposalID]raftnode.Complete
	nextID  raftnode.ProposalID
	// Trace, when non-nil, receives every traced line (for debugging).
	Trace func(string)
}

type envelope struct {
	from, to, group uint64
	msg             *raftpb.Message
}

// Node is one server: its engine, its disk and its logs.
type Node struct {
	ID    uint64
	Raft  *raftnode.Node
	FS    *vfs.Mem
	Logs  map[uint64]*storage.Log
	Down  bool
	jobs  []func() // the engine's disk jobs, carried out at the node's next disk step
	busy  int      // steps before the disk takes the next job (Config.SyncLogsPerStep)
	hwm   map[uint64]int64
	err   error // why the engine stopped (a fail-stop), reported by Step
	c     *Cluster
	crash *rand.Rand
}

// New builds and bootstraps a cluster.
func New(cfg Config) (*Cluster, error) {
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = 1 << 20
	}
	if cfg.TickEvery == 0 {
		cfg.TickEvery = 3
	}
	c := &Cluster{
		cfg:     cfg,
		net:     rng.New(cfg.Seed, "network"),
		disk:    rng.New(cfg.Seed, "disk"),
		cut:     map[[2]uint64]bool{},
		trace:   sha256.New(),
		Results: map[raftnode.ProposalID]raftnode.Complete{},
	}
	voters := slices.Clone(cfg.Nodes)
	slices.Sort(voters)
	for _, id := range voters {
		n := &Node{ID: id, FS: vfs.NewMem(), c: c, crash: rng.New(cfg.Seed, fmt.Sprintf("crash-%d", id))}
		// The node's data directory, made durable as an installer would.
		if err := n.FS.MkdirAll(n.dir()); err != nil {
			return nil, err
		}
		if err := errors.Join(n.FS.SyncDir("/"), n.FS.SyncDir(n.dir())); err != nil {
			return nil, err
		}
		for _, g := range cfg.Groups {
			l, err := n.openLog(g)
			if err != nil {
				return nil, err
			}
			if err := l.Bootstrap(&raftpb.ConfState{Voters: voters}); err != nil {
				return nil, err
			}
			if err := l.Close(); err != nil {
				return nil, err
			}
		}
		if err := n.start(); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	return c, nil
}

func (n *Node) openLog(group uint64) (*storage.Log, error) {
	return storage.Open(storage.Options{
		FS:          n.FS,
		Dir:         path.Join(n.dir(), fmt.Sprintf("g%d", group)),
		Stream:      group,
		SegmentSize: n.c.cfg.SegmentSize,
	})
}

func (n *Node) dir() string { return fmt.Sprintf("/n%d", n.ID) }

// start opens the node's logs and builds a fresh engine over them.
func (n *Node) start() error {
	cc := n.c.cfg.Core
	cc.ID = n.ID
	cc.SyncWrites = n.c.cfg.SyncWrites
	n.Raft = raftnode.NewNode(raftnode.NodeConfig{
		Core:     cc,
		Logger:   slog.New(slog.DiscardHandler), // a fail-stop comes back through Stopped
		OnEffect: func(e raftnode.Effect) { n.c.record("n%d %s", n.ID, raftnode.Describe(e)) },
		OnMembership: func(g uint64, cs *raftpb.ConfState, ctx []byte) {
			if n.c.cfg.OnMembership != nil {
				n.c.cfg.OnMembership(n.ID, g, cs, ctx)
			}
		},
	}, memIO{n})
	n.Logs = map[uint64]*storage.Log{}
	n.hwm = map[uint64]int64{}
	n.jobs, n.err = nil, nil
	for _, g := range n.c.cfg.Groups {
		l, err := n.openLog(g)
		if err != nil {
			return fmt.Errorf("node %d group %d: %w", n.ID, g, err)
		}
		n.Logs[g] = l
		if err := n.Raft.AddGroup(g, l); err != nil {
			return err
		}
	}
	n.Down = false
	n.Raft.Flush()
	return nil
}

// Node returns the node with id.
func (c *Cluster) Node(id uint64) *Node {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Nodes returns every node, by id.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// HighWatermark returns the node's last applied high watermark of a group.
func (n *Node) HighWatermark(group uint64) int64 { return n.hwm[group] }

func (c *Cluster) record(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	c.trace.Write([]byte(line))
	c.trace.Write([]byte{'\n'})
	if c.Trace != nil {
		c.Trace(line)
	}
}

// TraceHash is the hash of everything that happened so far.
func (c *Cluster) TraceHash() string { return hex.EncodeToString(c.trace.Sum(nil)) }

// memIO is a node as the driver of its raftnode.Node: messages go on the
// wire, disk jobs wait for the node's next disk step.
type memIO struct{ n *Node }

func (d memIO) Send(group uint64, m *raftpb.Message) {
	// Clone: peers must never share memory, as over a real wire.
	c := d.n.c
	c.wire = append(c.wire, envelope{from: d.n.ID, to: m.GetTo(), group: group, msg: proto.Clone(m).(*raftpb.Message)})
}

func (d memIO) Write(j *raftnode.WriteJob) {
	n := d.n
	n.jobs = append(n.jobs, func() { n.Raft.Written(j, j.Run()) })
}

func (d memIO) Sync(j *raftnode.SyncJob) {
	n := d.n
	n.jobs = append(n.jobs, func() {
		if k := n.c.cfg.SyncLogsPerStep; k > 0 {
			n.busy = (j.Logs() + k - 1) / k
		}
		n.Raft.Synced(j, j.Run())
	})
}

func (d memIO) Install(j *raftnode.InstallJob) {
	n := d.n
	n.jobs = append(n.jobs, func() { n.Raft.Installed(j, j.Run(n.c.fetchEntries)) })
}

func (d memIO) Complete(c raftnode.Complete) { d.n.c.Results[c.ID] = c }

func (d memIO) Publish(group uint64, v raftnode.View) { d.n.hwm[group] = v.HighWatermark }

func (d memIO) Stopped(err error) { d.n.err = fmt.Errorf("node %d stopped: %w", d.n.ID, err) }

// diskStep carries out the node's pending disk jobs in order, as the
// production writer and syncer would, each followed by the engine's next
// steps (which may queue more jobs, for the next disk step).
func (n *Node) diskStep() error {
	jobs := n.jobs
	n.jobs = nil
	for k, job := range jobs {
		if n.Down || n.err != nil {
			break
		}
		if n.busy > 0 { // the rest wait, before what the engine queued since
			n.jobs = append(jobs[k:], n.jobs...)
			break
		}
		job()
		n.Raft.Flush()
	}
	return n.err
}

// fetchEntries copies committed entries from a peer's log at once (a
// snapshot install; the simulator models this copy as instantaneous too).
func (c *Cluster) fetchEntries(group, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
	n := c.Node(peer)
	if n == nil || n.Down {
		return nil, 0, fmt.Errorf("n%d is down", peer)
	}
	ents, prev, err := n.Logs[group].CommittedEntries(from, to, 1<<20)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*raftpb.Entry, len(ents))
	for i, e := range ents {
		out[i] = proto.Clone(e).(*raftpb.Entry)
	}
	return out, prev, nil
}

// Step runs one round: disks finish work, the network delivers, clocks tick.
func (c *Cluster) Step() error {
	c.steps++
	for _, n := range c.nodes {
		if n.busy > 0 {
			n.busy--
		}
		if n.Down || len(n.jobs) == 0 || n.busy > 0 || c.disk.Float64() < c.cfg.DiskDelay {
			continue
		}
		if err := n.diskStep(); err != nil {
			return err
		}
	}
	wire := c.wire
	c.wire = nil
	c.net.Shuffle(len(wire), func(i, j int) { wire[i], wire[j] = wire[j], wire[i] })
	for _, env := range wire {
		if c.net.Float64() < c.cfg.Delay {
			c.wire = append(c.wire, env)
			continue
		}
		to := c.Node(env.to)
		if to == nil || to.Down || c.cut[[2]uint64{env.from, env.to}] || c.net.Float64() < c.cfg.DropRate {
			continue
		}
		to.Raft.Step(env.group, env.msg)
		to.Raft.Flush()
	}
	if c.steps%c.cfg.TickEvery == 0 {
		for _, n := range c.nodes {
			if !n.Down {
				n.Raft.Tick()
				n.Raft.Flush()
			}
		}
	}
	for _, n := range c.nodes {
		if !n.Down && n.err != nil {
			return n.err
		}
	}
	return nil
}

// Run runs n steps.
func (c *Cluster) Run(steps int) error {
	for i := 0; i < steps; i++ {
		if err := c.Step(); err != nil {
			return err
		}
	}
	return nil
}

// RunUntil steps until cond holds or max steps pass; it reports whether
// cond held.
func (c *Cluster) RunUntil(max int, cond func() bool) (bool, error) {
	for i := 0; i < max; i++ {
		if cond() {
			return true, nil
		}
		if err := c.Step(); err != nil {
			return false, err
		}
	}
	return cond(), nil
}

// Leader returns the node that leads group (by its own account, with the
// highest term), or nil.
func (c *Cluster) Leader(group uint64) *Node {
	var best *Node
	var bestTerm uint64
	for _, n := range c.nodes {
		if n.Down {
			continue
		}
		s, ok := n.Raft.Status(group)
		if ok && s.Role == "StateLeader" && s.Term >= bestTerm {
			best, bestTerm = n, s.Term
		}
	}
	return best
}

// Propose proposes data on node n and returns the proposal id; the outcome
// appears in Results.
func (c *Cluster) Propose(n *Node, group uint64, data []byte) raftnode.ProposalID {
	c.nextID++
	id := c.nextID
	n.Raft.Propose(group, id, data)
	n.Raft.Flush()
	return id
}

// ProposeConfChange proposes a membership change on node n.
func (c *Cluster) ProposeConfChange(n *Node, group uint64, cc *raftpb.ConfChangeV2) raftnode.ProposalID {
	c.nextID++
	id := c.nextID
	n.Raft.ProposeConfChange(group, id, cc)
	n.Raft.Flush()
	return id
}

// Crash stops node id like a power cut: unsynced disk writes are partly
// lost (seeded), in-flight work and messages to it vanish.
func (c *Cluster) Crash(id uint64) {
	n := c.Node(id)
	if n == nil || n.Down {
		return
	}
	c.record("crash n%d", id)
	n.Down = true
	n.jobs, n.busy = nil, 0
	n.FS.Crash(n.crash)
	n.Logs = nil
	n.Raft = nil
}

// Restart recovers a crashed node from its disk.
func (c *Cluster) Restart(id uint64) error {
	n := c.Node(id)
	if n == nil || !n.Down {
		return nil
	}
	c.record("restart n%d", id)
	return n.start()
}

// Partition cuts both directions between a and b; Heal restores all links.
func (c *Cluster) Partition(a, b uint64) {
	c.cut[[2]uint64{a, b}] = true
	c.cut[[2]uint64{b, a}] = true
	c.record("partition n%d n%d", a, b)
}

// Cut drops what from sends to; to's messages still reach from (a
// one-way partition; also what a paused process looks like to its peers,
// which it keeps hearing: their messages wait in its socket).
func (c *Cluster) Cut(from, to uint64) {
	c.cut[[2]uint64{from, to}] = true
	c.record("cut n%d -> n%d", from, to)
}

// Isolate cuts node id off from every other node.
func (c *Cluster) Isolate(id uint64) {
	for _, n := range c.nodes {
		if n.ID != id {
			c.Partition(id, n.ID)
		}
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	c.cut = map[[2]uint64]bool{}
	c.record("heal")
}

// Close closes every log.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		for _, g := range n.c.cfg.Groups {
			if l := n.Logs[g]; l != nil {
				_ = l.Close()
			}
		}
	}
}
