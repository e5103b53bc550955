package simulator

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// node is one simulated server process: its core, logs, disk worker and
// Kafka connections. The disk (fs) outlives the process.
type node struct {
	s      *Sim
	id     uint64
	dc     int
	fs     *vfs.Mem
	core   *raftnode.Core
	logs   map[uint64]*storage.Log
	down   bool
	paused bool
	inc    int      // incarnation: bumped at every crash and restart
	held   []*event // events that arrived while paused

	disk     diskWorker // the append worker (disk.go)
	slowTill int64      // fsyncs are slow until then (nemesis)

	grp     map[uint64]*gview
	futures map[raftnode.ProposalID]func(int64, error)
	reads   map[raftnode.ProposalID]func(uint64, error) // ReadIndex requests
	// Canary ack-before-commit: produces acknowledged once the entry at
	// index is locally durable, by group.
	early      map[uint64]map[uint64]func(int64, error)
	lastAppend map[uint64]uint64
	conns      []*sconn
	woke       bool
	pendingFx  []raftnode.Effect // effects taken for inspection, not yet routed

	diskR  *rand.Rand
	crashR *rand.Rand

	// BitFlips: victim nodes may be corrupted (at most a minority);
	// corrupted once a flip or misdirected write was injected; quarantined
	// once the node detected corruption and stopped for good.
	victim, corrupted, quarantined bool
}

// gview is what the process knows about one group (like Host.status).
type gview struct {
	leader, term uint64
	role         string
	hwm          int64
	applied      uint64
	appliedTerm  uint64
	changed      chan struct{}
	fences       []waitingFence // read index known, not yet applied
}

type waitingFence struct {
	index uint64
	f     *simFence
}

// simFence is the simulator's kafka.ReadFence: a ReadIndex round through
// the node's core, passed once the read index is applied (like the Host's).
type simFence struct {
	done chan struct{}
	err  error
}

func (f *simFence) Done() <-chan struct{} { return f.done }
func (f *simFence) Err() error            { return f.err }

// fence starts a leadership confirmation for a read of group.
func (n *node) fence(group uint64) *simFence {
	f := &simFence{done: make(chan struct{})}
	n.s.nextProp++
	id := n.s.nextProp
	n.reads[id] = func(index uint64, err error) {
		g := n.grp[group]
		switch {
		case err != nil:
			f.err = err
			close(f.done)
		case g != nil && g.applied >= index:
			close(f.done)
		case g != nil:
			g.fences = append(g.fences, waitingFence{index: index, f: f})
			return
		default:
			f.err = kafka.ErrNotLeader
			close(f.done)
		}
		n.woke = true
	}
	n.core.ReadIndex(group, id)
	n.route()
	return f
}

func (g *gview) bump() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (n *node) dir() string { return fmt.Sprintf("/n%d", n.id) }

func (n *node) openLog(group uint64) (*storage.Log, error) {
	return storage.Open(storage.Options{
		FS:          n.fs,
		Dir:         path.Join(n.dir(), fmt.Sprintf("g%d", group)),
		Stream:      group,
		SegmentSize: n.s.segmentSize,
	})
}

// bootstrap creates the node's data directory and bootstraps every group.
func (n *node) bootstrap(voters []uint64) error {
	if err := n.fs.MkdirAll(n.dir()); err != nil {
		return err
	}
	if err := errors.Join(n.fs.SyncDir("/"), n.fs.SyncDir(n.dir())); err != nil {
		return err
	}
	for _, g := range n.s.groups {
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

// start runs the process: open the logs, build a core, start ticking.
func (n *node) start() error {
	s := n.s
	n.inc++
	n.down, n.paused, n.held = false, false, nil
	n.disk = newDiskWorker()
	n.futures = map[raftnode.ProposalID]func(int64, error){}
	n.reads = map[raftnode.ProposalID]func(uint64, error){}
	n.early = map[uint64]map[uint64]func(int64, error){}
	n.lastAppend = map[uint64]uint64{}
	n.grp = map[uint64]*gview{}
	n.logs = map[uint64]*storage.Log{}
	cc := s.coreCfg
	cc.ID = n.id
	n.core = raftnode.NewCore(cc)
	for _, g := range s.groups {
		l, err := n.openLog(g)
		if err != nil {
			return fmt.Errorf("node %d cannot open group %d after restart: %w", n.id, g, err)
		}
		n.logs[g] = l
		n.grp[g] = &gview{changed: make(chan struct{})}
		if err := n.core.AddGroup(g, l); err != nil {
			return fmt.Errorf("node %d group %d: %w", n.id, g, err)
		}
	}
	n.route()
	phase := time.Duration(n.diskR.Int64N(int64(s.tick)))
	s.w.after(phase, n, n.tickLoop)
	return nil
}

func (n *node) tickLoop() {
	n.core.Tick()
	n.route()
	n.s.w.after(n.s.tick, n, n.tickLoop)
}

// stop ends the process. powerLoss also loses un-synced disk writes.
func (n *node) stop(powerLoss bool) {
	if n.down {
		return
	}
	if powerLoss {
		n.fs.Crash(n.crashR)
	}
	n.down = true
	n.inc++
	n.core, n.logs, n.held = nil, nil, nil
	n.futures, n.reads, n.early, n.pendingFx = nil, nil, nil, nil
	n.disk, n.paused = diskWorker{}, false
	conns := n.conns
	n.conns = nil
	for _, sc := range conns {
		sc.reset("server process died")
	}
}

// failStop is what production does when storage fails: stop the process so
// nothing un-durable is acknowledged. The simulator restarts it later.
func (n *node) failStop(err error) {
	s := n.s
	if errors.Is(err, storage.ErrCorrupt) {
		s.detect(n, "write", err)
		return
	}
	s.w.fault("node-failstop", "n%d storage failed: %v", n.id, err)
	n.stop(false)
	s.w.after(durn(s.nemR, 300*time.Millisecond, 2*time.Second), nil, func() {
		n.fs.SetFaults(vfs.Faults{})
		n.fs.SetCapacity(0)
		s.restart(n)
	})
}

// route carries out the core's effects.
func (n *node) route() {
	s := n.s
	fx := append(n.pendingFx, n.core.TakeEffects()...)
	n.pendingFx = nil
	for _, e := range fx {
		if s.traceEffects {
			s.w.record("n%d %s", n.id, raftnode.Describe(e))
		}
		switch e := e.(type) {
		case raftnode.Send:
			s.sendRaft(n, e.Group, e.Msg)
		case raftnode.Append:
			if ents := e.Msg.GetEntries(); len(ents) > 0 {
				n.lastAppend[e.Group] = ents[len(ents)-1].GetIndex()
			}
			n.disk.work = append(n.disk.work, e)
		case raftnode.SaveConfState, raftnode.Retain:
			n.disk.work = append(n.disk.work, e)
		case raftnode.Applied:
			n.disk.work = append(n.disk.work, e)
			if g := n.grp[e.Group]; g != nil {
				g.applied = e.Index
				kept := g.fences[:0]
				for _, w := range g.fences {
					if w.index <= e.Index {
						close(w.f.done)
						n.woke = true
					} else {
						kept = append(kept, w)
					}
				}
				g.fences = kept
			}
			if g := n.grp[e.Group]; g != nil && (g.hwm != e.HighWatermark || g.appliedTerm != e.Term) {
				if e.HighWatermark < g.hwm && e.Term == g.appliedTerm {
					s.failf("n%d group %d: high watermark went back from %d to %d", n.id, e.Group, g.hwm, e.HighWatermark)
				}
				g.hwm, g.appliedTerm = e.HighWatermark, e.Term
				g.bump()
				n.woke = true
			}
		case raftnode.Complete:
			if f := n.reads[e.ID]; f != nil {
				delete(n.reads, e.ID)
				f(e.Index, e.Err)
				continue
			}
			if f := n.futures[e.ID]; f != nil {
				delete(n.futures, e.ID)
				f(e.BaseOffset, e.Err)
			}
		case raftnode.LeaderChanged:
			if e.Role == "StateLeader" && e.Term > s.leaderTerm[e.Group] {
				s.leaderTerm[e.Group] = e.Term
			}
			if g := n.grp[e.Group]; g != nil {
				g.leader, g.term, g.role = e.Leader, e.Term, e.Role
				g.bump()
				n.woke = true
			}
		}
	}
	n.kick()
	if n.woke {
		n.woke = false
		for _, sc := range slices.Clone(n.conns) {
			sc.wake()
		}
	}
}

// ackEarly (canary) acknowledges produces whose entry is locally durable,
// without waiting for the commit.
func (n *node) ackEarly(g uint64, last uint64) {
	m := n.early[g]
	for _, idx := range sortedKeys(m) {
		if idx > last {
			break
		}
		done := m[idx]
		delete(m, idx)
		if base, _, err := n.logs[g].EntryOffsets(idx); err == nil {
			done(base, nil)
		}
	}
}

// propose submits data in group on this node; done gets the outcome.
func (n *node) propose(group uint64, data []byte, done func(int64, error)) {
	s := n.s
	s.nextProp++
	id := s.nextProp
	once := false
	f := func(base int64, err error) {
		if once {
			return
		}
		once = true
		done(base, err)
	}
	n.futures[id] = f
	n.core.Propose(group, id, data)
	if s.cfg.Canary == CanaryAckBeforeCommit && n.futures[id] != nil {
		// The entry the proposal became is the last one of the append the
		// core just emitted.
		var idx uint64
		for _, e := range n.core.TakeEffects() {
			if a, ok := e.(raftnode.Append); ok && a.Group == group {
				if ents := a.Msg.GetEntries(); len(ents) > 0 {
					idx = ents[len(ents)-1].GetIndex()
				}
			}
			n.requeue(e)
		}
		if idx != 0 {
			if n.early[group] == nil {
				n.early[group] = map[uint64]func(int64, error){}
			}
			n.early[group][idx] = f
		}
	}
	n.route()
}

// requeue puts an effect taken for inspection back for route. The core has
// no API for that, so route's work is done here for the one effect.
func (n *node) requeue(e raftnode.Effect) { n.pendingFx = append(n.pendingFx, e) }

func (n *node) proposeConfChange(group uint64, cc *raftpb.ConfChangeV2, done func(error)) {
	n.s.nextProp++
	id := n.s.nextProp
	n.futures[id] = func(_ int64, err error) { done(err) }
	n.core.ProposeConfChange(group, id, cc)
	n.route()
}

// readable: this process leads the group and applied an entry of its term.
func (n *node) readable(group uint64) bool {
	g := n.grp[group]
	return g != nil && g.leader == n.id && g.appliedTerm == g.term && g.term != 0
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

// cloneMsg copies a raft message: peers never share memory.
func cloneMsg(m *raftpb.Message) *raftpb.Message { return proto.Clone(m).(*raftpb.Message) }

var _ kafka.Backend = (*backend)(nil)
