package simulator

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/server"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// node is one simulated server process: the production replication engine
// (raftnode.Node) over its logs on the simulated disk, the production
// Kafka backend (server.Backend) and its connections. The disk outlives
// the process.
type node struct {
	s      *Sim
	id     uint64
	dc     int
	disk   *vfs.Mem     // the medium: what a power loss keeps, bit flips, capacity
	fs     *vfs.ErrorFS // the disk as the process sees it: EIO, misdirected writes
	rn     *raftnode.Node
	logs   map[uint64]*storage.Log
	down   bool
	paused bool
	inc    int                  // incarnation: bumped at every crash and restart
	held   []*event             // events that arrived while paused
	outq   map[uint64]*outQueue // the transport's queues to peers whose stream broke (queue.go)
	links  map[uint64]link      // its raft streams to peers (links.go)

	slowTill  int64 // fsyncs are slow until then (nemesis)
	slowClock int   // > 1: ticks come this many times slower (nemesis)

	// dirID is the data dir id of the disk (a new one after a wipe);
	// roster is what the server knows of its peers (peers.json, on the
	// disk: it survives crashes, not wipes); joining: the disk was wiped
	// and the server started over on an empty one.
	dirID   uint64
	roster  *server.Roster
	joining bool
	space   *storage.Space // the data dir's space reserve, as the server's
	// files is the process's file cache, shared by its logs as the
	// server's, and small: idle logs park their active segments in it
	// (storage.Log.Park) and evictions close them between writes.
	files *storage.FileCache

	// promised is what the engine had told raft is durable when the
	// process last stopped: its restart must find it (raftnode.Durable).
	// seen is what it had promised at the last look (watchPromises).
	promised, seen map[uint64]raftnode.Durable

	grp     map[uint64]*gview
	futures map[raftnode.ProposalID]func(raftnode.Result, error)
	backend *server.Backend
	conns   []*sconn
	// flushing: flush is running; dirty: the engine was asked something
	// since (flush goes round again).
	flushing, dirty bool
	ticks           int

	diskR  *rand.Rand
	crashR *rand.Rand

	// BitFlips: victim nodes may be corrupted (at most a minority);
	// corrupted once a flip or misdirected write was injected; quarantined
	// once the node detected corruption and stopped for good. detectedBy
	// says where the next corruption the engine reports was found.
	victim, corrupted, quarantined bool
	detectedBy                     string
}

// gview is a group's view as the process published it, with the channel
// its connections wait on (as the Host keeps it).
type gview struct {
	raftnode.View
	changed chan struct{}
}

func (g *gview) bump() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (n *node) dir() string { return fmt.Sprintf("/n%d", n.id) }

// setDisk puts n on disk, behind a device with no faults armed.
func (n *node) setDisk(disk *vfs.Mem) {
	n.disk = disk
	n.fs = vfs.NewErrorFS(disk)
}

func (n *node) openLog(group uint64) (*storage.Log, error) {
	return storage.Open(storage.Options{
		FS:          n.fs,
		Dir:         path.Join(n.dir(), fmt.Sprintf("g%d", group)),
		Stream:      group,
		SegmentSize: n.s.segmentSize,
		Space:       n.space,
		Files:       n.files,
		Logger:      discard,
	})
}

var discard = slog.New(slog.DiscardHandler)

// bootstrap creates the node's data directory and bootstraps every group.
func (n *node) bootstrap(voters []uint64) error {
	if err := n.fs.MkdirAll(n.dir()); err != nil {
		return err
	}
	if err := errors.Join(n.fs.SyncDir("/"), n.fs.SyncDir(n.dir())); err != nil {
		return err
	}
	for _, g := range n.s.staticGroups() {
		l, err := n.openLog(g)
		if err != nil {
			return err
		}
		if err := l.Bootstrap(&raftpb.ConfState{Voters: voters}); err != nil {
			return err
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	return nil
}

// start runs the process: open the logs, start the engine, start ticking.
func (n *node) start() error {
	s := n.s
	n.inc++
	n.down, n.paused, n.held = false, false, nil
	n.futures = map[raftnode.ProposalID]func(raftnode.Result, error){}
	n.seen = map[uint64]raftnode.Durable{}
	n.grp = map[uint64]*gview{}
	n.logs = map[uint64]*storage.Log{}
	n.files = storage.NewFileCache(1)
	n.detectedBy = "engine"
	cc := s.coreCfg
	cc.ID = n.id
	cfg := raftnode.NodeConfig{Core: cc, Logger: s.logger(n), Watchdog: n.flushRound,
		OnMembership: func(g uint64, cs *raftpb.ConfState, ctx []byte) { n.roster.Applied(n.id, g, cs, ctx) }}
	if s.traceEffects {
		cfg.OnEffect = func(e raftnode.Effect) { s.w.record("n%d %s", n.id, raftnode.Describe(e)) }
	}
	n.rn = raftnode.NewNode(cfg, simIO{n})
	n.space = storage.NewSpace(n.fs, n.dir(), 2*s.segmentSize+8<<10)
	n.space.OnChange = func(low bool) {
		s.w.record("n%d disk short of space: %v", n.id, low)
		n.rn.SetDiskFull(low)
	}
	n.backend = server.NewBackend(simReplication{n}, simCatalog{n})
	// The static groups, then (control plane) those assigned to it whose
	// logs are on its disk, as a server hosts its saved assignment.
	for _, g := range append(s.staticGroups(), n.assignedOnDisk()...) {
		if err := n.openGroup(g); err != nil {
			return err
		}
	}
	n.flush()
	phase := time.Duration(n.diskR.Int64N(int64(s.tick)))
	s.w.after(phase, n, n.tickLoop)
	return nil
}

// parkTicks is how often a node parks its idle logs' active segments (a
// server's parkInterval, scaled to the simulator's short runs).
const parkTicks = 20

// openGroup opens group g's log on the disk and starts its raft group.
func (n *node) openGroup(g uint64) error {
	s := n.s
	l, err := n.openLog(g)
	if err != nil {
		return fmt.Errorf("node %d cannot open group %d after restart: %w", n.id, g, err)
	}
	n.logs[g] = l
	if d, ok := n.promised[g]; ok && !n.corrupted {
		if err := d.Check(l); err != nil {
			s.fail(checkDurability, "n%d g%d restarted without what it reported durable: %v", n.id, g, err)
		}
	}
	n.grp[g] = &gview{changed: make(chan struct{})}
	_, cs, err := l.InitialState()
	if err != nil {
		return fmt.Errorf("node %d group %d: %w", n.id, g, err)
	}
	n.roster.Hosted(g, cs)
	if err := n.rn.AddGroup(g, l); err != nil {
		_ = l.Close()
		delete(n.logs, g)
		delete(n.grp, g)
		return fmt.Errorf("node %d group %d: %w", n.id, g, err)
	}
	return nil
}

func (n *node) tickLoop() {
	if n.ticks++; n.ticks%10 == 0 {
		n.space.Check() // the server checks its space reserve periodically
	}
	if n.ticks%parkTicks == 0 { // the server parks idle streams' files periodically
		for _, g := range n.s.groups {
			if l := n.logs[g]; l != nil {
				l.Park()
			}
		}
	}
	n.rn.Tick()
	n.flush()
	n.s.w.after(n.s.tick*time.Duration(max(n.slowClock, 1)), n, n.tickLoop)
}

// flush carries out the engine's effects, then wakes the connections whose
// wait ended (a view change, a read fence finished), as the production
// connection goroutines wake on their channels; until nothing more was
// asked of the engine. A session calls into the engine (propose, fence)
// without flushing: the event that called the session flushes after it, so
// no session is re-entered while it runs.
func (n *node) flush() {
	if n.flushing {
		n.dirty = true
		return
	}
	n.flushing = true
	defer func() { n.flushing = false }()
	n.dirty = true
	for round := 1; n.dirty; round++ {
		n.flushRound(round)
		n.dirty = false
		n.rn.Flush()
		for _, sc := range slices.Clone(n.conns) {
			sc.wake()
		}
	}
}

// watchPromises looks at what the engine just reported durable: right
// after a vote or a membership change, BUGGIFY sometimes cuts the power,
// so a vote or a membership change that was not really durable is lost
// and the restart's durability check sees it.
func (n *node) watchPromises() {
	s := n.s
	for _, g := range n.rn.Groups() {
		d, ok := n.rn.Durable(g)
		if !ok {
			continue
		}
		old, seen := n.seen[g]
		n.seen[g] = d
		switch {
		case !seen || s.liveness || s.openWindows() >= 3:
		case d.Vote != 0 && (d.Vote != old.Vote || d.Term != old.Term) && s.w.bug.fire(n.crashR, "crash.after-vote", 0.05):
			s.powerLossSoon(n, fmt.Sprintf("voted for n%d in term %d of g%d", d.Vote, d.Term, g))
		case d.Conf != old.Conf && s.w.bug.fire(n.crashR, "crash.after-conf-change", 0.2):
			s.powerLossSoon(n, fmt.Sprintf("applied a membership change of g%d", g))
		}
	}
}

// stop ends the process. powerLoss also loses un-synced disk writes.
func (n *node) stop(powerLoss bool) {
	if n.down {
		return
	}
	n.promised = map[uint64]raftnode.Durable{}
	for _, g := range n.rn.Groups() {
		if d, ok := n.rn.Durable(g); ok {
			n.promised[g] = d
		}
	}
	if powerLoss {
		n.disk.Crash(n.crashR)
	}
	n.down = true
	n.inc++
	n.rn, n.logs, n.held, n.futures, n.backend, n.outq, n.links = nil, nil, nil, nil, nil, nil, nil
	n.paused = false
	conns := n.conns
	n.conns = nil
	for _, sc := range conns {
		sc.reset("server process died")
	}
}

// propose submits data in group on this node; done gets the outcome.
func (n *node) propose(group uint64, data []byte, done func(raftnode.Result, error)) {
	n.rn.Propose(group, n.future(done), data)
	n.dirty = true
}

func (n *node) proposeRecords(group uint64, data []byte, offsets int64, chain raftnode.Chain, done func(raftnode.Result, error)) {
	n.rn.ProposeRecords(group, n.future(done), data, offsets, chain)
	n.dirty = true
}

// future registers done for the next proposal id.
func (n *node) future(done func(raftnode.Result, error)) raftnode.ProposalID {
	n.s.nextProp++
	n.futures[n.s.nextProp] = done
	return n.s.nextProp
}

func (n *node) proposeConfChange(group uint64, cc *raftpb.ConfChangeV2, done func(error)) {
	n.s.nextProp++
	id := n.s.nextProp
	n.futures[id] = func(_ raftnode.Result, err error) { done(err) }
	n.rn.ProposeConfChange(group, id, cc)
	n.flush()
}

// Calls into the engine from sessions leave the flush to the event that
// called the session (flush).

// readable: this process leads the group and applied an entry of its term.
func (n *node) readable(group uint64) bool {
	g := n.grp[group]
	return g != nil && g.Readable(n.id)
}

// simReplication is the node's engine as the production backend sees it
// (the Host's part of server.Replication).
type simReplication struct{ n *node }

func (r simReplication) ID() uint64 { return r.n.id }

func (r simReplication) View(group uint64) (raftnode.View, bool) {
	g := r.n.grp[group]
	if g == nil {
		return raftnode.View{}, false
	}
	return g.View, true
}

func (r simReplication) HighWatermark(group uint64) (int64, <-chan struct{}, bool) {
	g := r.n.grp[group]
	if g == nil {
		return 0, nil, false
	}
	return g.HighWatermark, g.changed, true
}

func (r simReplication) Status(group uint64) (raftnode.GroupStatus, bool) {
	return r.n.rn.Status(group)
}

func (r simReplication) ProposeFunc(group uint64, data []byte, done func(raftnode.Result, error)) error {
	r.n.propose(group, data, done)
	return nil
}

func (r simReplication) ProposeRecordsFunc(group uint64, data []byte, offsets int64, chain raftnode.Chain, done func(raftnode.Result, error)) error {
	r.n.proposeRecords(group, data, offsets, chain, done)
	return nil
}

// EndChain: a connection closed (the process may be gone with it).
func (r simReplication) EndChain(chain raftnode.Chain) {
	if r.n.rn != nil {
		r.n.rn.EndChain(chain)
	}
}

func (r simReplication) Fence(group uint64) *raftnode.Fence {
	f := raftnode.NewFence()
	r.n.rn.Fence(group, f)
	r.n.dirty = true
	return f
}

// FailStop: a read found corruption. The process stops after this
// request's turn, as the production host does on its loop.
func (r simReplication) FailStop(err error) {
	n := r.n
	inc := n.inc
	n.s.w.after(0, nil, func() {
		if n.inc == inc && !n.down {
			n.detectedBy = "read"
			n.rn.FailStop(err)
			n.flush()
		}
	})
}

// simCatalog is the simulated cluster's streams and brokers: every stream
// on every node.
type simCatalog struct{ n *node }

func (c simCatalog) Brokers() []kafka.Broker {
	var out []kafka.Broker
	for _, n := range c.n.s.nodes {
		out = append(out, kafka.Broker{NodeID: int32(n.id), Host: fmt.Sprintf("n%d", n.id), Port: 9092, Rack: new(fmt.Sprintf("dc%d", n.dc))})
	}
	return out
}

func (c simCatalog) Streams() []string { return c.n.s.streams }

func (c simCatalog) Stream(name string) (server.StreamRef, bool) {
	s := c.n.s
	if s.cp != nil {
		if st, ok := s.cp.streams[name]; ok && st.State == configserver.StreamActive {
			return server.StreamRef{Group: st.Group, Replicas: slices.Sorted(slices.Values(st.Replicas)), Log: c.n.logs[st.Group],
				LeaderHint: s.cp.leaders[st.Group]}, true
		}
	}
	i := slices.Index(s.streams, name)
	if i < 0 {
		return server.StreamRef{}, false
	}
	var ids []uint64
	for _, n := range s.nodes {
		ids = append(ids, n.id)
	}
	g := s.groups[i]
	return server.StreamRef{Group: g, Replicas: ids, Log: c.n.logs[g]}, true
}

// memUsed is the total size of the files under dir.
func memUsed(m *vfs.Mem, dir string) int64 {
	names, err := m.List(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, name := range names {
		p := path.Join(dir, name)
		if sub, err := m.List(p); err == nil && sub != nil {
			total += memUsed(m, p)
			continue
		}
		if sz, err := m.Stat(p); err == nil {
			total += sz
		} else if !errors.Is(err, fs.ErrNotExist) {
			continue
		}
	}
	return total
}

// cloneMsg copies a raft message as the wire would: peers never share
// memory (except entry payloads and contexts, which nothing modifies). A
// field-by-field copy: proto.Clone's reflection was 7% of a batch's CPU.
func cloneMsg(m *raftpb.Message) *raftpb.Message {
	c := &raftpb.Message{
		Type: clonePtr(m.Type), To: clonePtr(m.To), From: clonePtr(m.From), Term: clonePtr(m.Term),
		LogTerm: clonePtr(m.LogTerm), Index: clonePtr(m.Index), Commit: clonePtr(m.Commit), Vote: clonePtr(m.Vote),
		Reject: clonePtr(m.Reject), RejectHint: clonePtr(m.RejectHint), Context: m.Context,
	}
	if m.Entries != nil {
		c.Entries = make([]*raftpb.Entry, len(m.Entries))
		for i, e := range m.Entries {
			c.Entries[i] = &raftpb.Entry{Term: clonePtr(e.Term), Index: clonePtr(e.Index), Type: clonePtr(e.Type), Data: e.Data}
		}
	}
	if m.Snapshot != nil {
		c.Snapshot = proto.Clone(m.Snapshot).(*raftpb.Snapshot)
	}
	for _, r := range m.Responses {
		c.Responses = append(c.Responses, cloneMsg(r))
	}
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
