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

	work     []raftnode.Effect
	diskBusy bool
	slowTill int64 // fsyncs are slow until then (nemesis)

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
	n.work, n.diskBusy = nil, false
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
	n.core, n.logs, n.work, n.held = nil, nil, nil, nil
	n.futures, n.reads, n.early, n.pendingFx = nil, nil, nil, nil
	n.diskBusy, n.paused = false, false
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
			n.work = append(n.work, e)
		case raftnode.SaveConfState, raftnode.Retain:
			n.work = append(n.work, e)
		case raftnode.Applied:
			n.work = append(n.work, e)
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
	if len(n.work) > 0 && !n.diskBusy {
		n.diskBusy = true
		s.w.after(durn(n.diskR, 20*time.Microsecond, 300*time.Microsecond), n, n.flushWrite)
	}
	if n.woke {
		n.woke = false
		for _, sc := range slices.Clone(n.conns) {
			sc.wake()
		}
	}
}

// flushWrite is the append worker's first half: write everything queued
// (like Host.applyBatch), then fsync after the disk's latency.
func (n *node) flushWrite() {
	work := n.work
	n.work = nil
	var done []raftnode.Append
	var touched []uint64
	for _, e := range work {
		switch e := e.(type) {
		case raftnode.Append:
			if err := writeAppend(n.logs[e.Group], e.Msg, n.snapshotSource(e)); err != nil {
				n.failStop(fmt.Errorf("group %d: %w", e.Group, err))
				return
			}
			done = append(done, e)
			if !slices.Contains(touched, e.Group) {
				touched = append(touched, e.Group)
			}
		case raftnode.SaveConfState:
			if err := n.logs[e.Group].ApplyConfState(e.Index, e.Conf); err != nil {
				n.failStop(fmt.Errorf("group %d: save conf state: %w", e.Group, err))
				return
			}
		case raftnode.Retain:
			if k, err := n.logs[e.Group].DeleteBefore(e.BeforeOffset); err != nil {
				n.s.w.record("n%d retention g%d failed: %v", n.id, e.Group, err)
			} else if k > 0 {
				n.s.w.record("n%d retention g%d before %d deleted %d segments", n.id, e.Group, e.BeforeOffset, k)
			}
		case raftnode.Applied:
			n.logs[e.Group].SetApplied(e.Index)
		}
	}
	s := n.s
	if s.cfg.Canary == CanaryAckBeforeFsync {
		// Broken on purpose: report the appends durable at once and fsync
		// lazily in the background.
		for _, a := range done {
			n.core.AppendDone(a.Group, a.Msg)
		}
		n.diskBusy = false
		n.route()
		s.w.after(durn(n.diskR, 100*time.Millisecond, 500*time.Millisecond), n, func() {
			for _, g := range touched {
				if _, err := n.logs[g].Sync(); err != nil {
					n.failStop(err)
					return
				}
			}
		})
		return
	}
	d := durn(n.diskR, 200*time.Microsecond, 2*time.Millisecond)
	switch {
	case s.w.now < n.slowTill:
		d = durn(n.diskR, 30*time.Millisecond, 400*time.Millisecond)
	case s.w.bug.fire(n.diskR, "disk.stall", 0.001):
		d = durn(n.diskR, 500*time.Millisecond, 2*time.Second)
		s.w.fault("buggify-disk-stall", "n%d fsync stalls %v", n.id, d)
	case s.w.bug.fire(n.diskR, "disk.slow-fsync", 0.05):
		d = durn(n.diskR, 20*time.Millisecond, 300*time.Millisecond)
		s.w.faults["buggify-slow-fsync"]++
	}
	s.w.after(d, n, func() { n.flushSync(done, touched) })
}

// flushSync is the second half: fsync every touched log, then report the
// appends done.
func (n *node) flushSync(done []raftnode.Append, touched []uint64) {
	for _, g := range touched {
		synced, err := n.logs[g].Sync()
		if err != nil {
			n.failStop(fmt.Errorf("group %d: sync: %w", g, err))
			return
		}
		if n.s.cfg.Canary == CanaryAckBeforeCommit {
			n.ackEarly(g, synced.LastIndex)
		}
	}
	for _, a := range done {
		n.core.AppendDone(a.Group, a.Msg)
	}
	n.diskBusy = false
	n.route()
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

// writeAppend writes a MsgStorageAppend's snapshot, entries and hard state
// (as raftnode's production host does).
func writeAppend(l *storage.Log, m *raftpb.Message, src storage.EntrySource) error {
	if m.GetSnapshot().GetMetadata().GetIndex() != 0 {
		if err := l.InstallSnapshot(m.GetSnapshot(), src); err != nil {
			return fmt.Errorf("install snapshot: %w", err)
		}
	}
	var hs *raftpb.HardState
	if m.Term != nil || m.Vote != nil || m.Commit != nil {
		hs = &raftpb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
	}
	if len(m.GetEntries()) == 0 && hs == nil {
		return nil
	}
	return l.Write(m.GetEntries(), hs)
}

// snapshotSource copies a snapshot's entries from its sender, falling back
// to the other replicas this node can reach (as Host.snapshotSource does);
// the copy is modelled as instantaneous. When no replica can serve them the
// install fails and the process stops (production retries meanwhile; a
// crash part way is a state the storage engine must handle anyway).
func (n *node) snapshotSource(a raftnode.Append) storage.EntrySource {
	return func(from, to uint64) ([]*raftpb.Entry, error) {
		s := n.s
		peers := []uint64{a.Leader}
		for _, p := range s.nodes {
			peers = append(peers, p.id)
		}
		for _, id := range peers {
			p := s.node(id)
			if p == nil || p == n || p.down || p.paused || s.cut[[2]uint64{p.id, n.id}] > 0 {
				continue
			}
			ents, err := p.logs[a.Group].Entries(from, to+1, 1<<20)
			if err != nil && errors.Is(err, storage.ErrCorrupt) {
				s.w.after(0, nil, func() {
					if !p.down {
						s.detect(p, "snapshot-source", err)
					}
				})
			}
			if err == nil && len(ents) > 0 && ents[0].GetIndex() == from {
				out := make([]*raftpb.Entry, len(ents))
				for i, e := range ents {
					out[i] = proto.Clone(e).(*raftpb.Entry)
				}
				s.w.record("n%d copies snapshot entries [%d,%d] of g%d from n%d", n.id, from, ents[len(ents)-1].GetIndex(), a.Group, p.id)
				return out, nil
			}
		}
		s.w.faults["snapshot-copy-failed"]++
		return nil, fmt.Errorf("no replica can serve snapshot entries [%d,%d] of group %d", from, to, a.Group)
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
