package raftnode

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/canary"
)

// Node is one server's replication engine without its goroutines: the
// Core with everything a server decides around it — the storage pipeline
// (pipeline.go), snapshot installs and their retries (install.go), read
// fences (fence.go), the views readers decide from (view.go), and the
// fail-stop. It is deterministic like the Core: it starts no goroutines,
// reads no clock and does no IO; it asks its Driver to start writes,
// fsyncs and copies and is told when they finish.
//
// Two drivers run it: the production Host (host.go: goroutines, files,
// TCP) and the simulator (simulated time, disk and network), so what the
// simulator checks is the production policy itself. Every method is called
// on the driver's loop, one at a time; after a round of calls the driver
// calls Flush.
type Node struct {
	cfg  NodeConfig
	core *Core
	d    Driver
	log  *slog.Logger

	logs  map[uint64]Log
	views map[uint64]View
	pipe  pipeline

	installs map[uint64]*InstallJob // groups installing a snapshot
	retries  map[uint64]uint64      // group -> tick of its next install attempt
	ticks    uint64

	durable map[uint64]Durable // what raft was told is on disk (durable.go)

	fences       map[uint64]*fenceRound
	reads        map[ProposalID]uint64 // read index request -> group
	nextInternal ProposalID

	pace pacer // catch-up pacing of appends to learners (pace.go)

	err error // why the node stopped; nil while it runs
}

// NodeConfig configures a Node.
type NodeConfig struct {
	Core Config
	// Logger receives what the node has to say (retention, install
	// retries, the fail-stop); default slog.Default().
	Logger *slog.Logger
	// OnEffect, when set, sees every effect of the core before it is
	// carried out (traces).
	OnEffect func(Effect)
	// OnMembership, when set, is told each membership change a group
	// applies, with the change's context, and the membership a snapshot
	// install brings, without one (on the loop: it must not block).
	OnMembership func(group uint64, cs *raftpb.ConfState, context []byte)
	// Watchdog, when set, is called at every round of Flush's loop with
	// the round's number: a driver that watches for livelocks (the
	// simulator) stops a loop that never settles from it, by panicking.
	Watchdog func(round int)
}

// livelockTicks is when the Livelock canary starts (after 3 s of 10 ms
// ticks in the simulator).
const livelockTicks = 300

// Driver is what a Node asks of whoever runs it. The Node calls it on its
// loop; the driver reports back (Written, Synced, Installed) on the loop
// too.
type Driver interface {
	// Send delivers a Raft message to a peer; it must not block.
	Send(group uint64, m *raftpb.Message)
	// Write runs j.Run off the loop and reports Node.Written.
	Write(j *WriteJob)
	// Sync runs j.Run off the loop and reports Node.Synced.
	Sync(j *SyncJob)
	// Install runs j.Run off the loop and reports Node.Installed.
	Install(j *InstallJob)
	// Complete is the outcome of a proposal the driver submitted.
	Complete(c Complete)
	// Publish: a group's view changed.
	Publish(group uint64, v View)
	// Stopped: the node failed (storage, a raft invariant) and stopped
	// rather than acknowledge what might not be durable. The process must
	// exit; a supervisor restarts it.
	Stopped(err error)
}

// NewNode returns a node with no groups.
func NewNode(cfg NodeConfig, d Driver) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Core.Logger == nil {
		cfg.Core.Logger = SlogLogger{L: cfg.Logger}
	}
	return &Node{
		cfg: cfg, core: NewCore(cfg.Core), d: d, log: cfg.Logger,
		logs: map[uint64]Log{}, views: map[uint64]View{}, pipe: newPipeline(),
		installs: map[uint64]*InstallJob{}, retries: map[uint64]uint64{}, durable: map[uint64]Durable{},
		fences: map[uint64]*fenceRound{}, reads: map[ProposalID]uint64{},
	}
}

// ID returns this server's node id.
func (n *Node) ID() uint64 { return n.core.ID() }

// Err returns why the node stopped, or nil while it runs.
func (n *Node) Err() error { return n.err }

// AddGroup starts hosting a group on log.
func (n *Node) AddGroup(id uint64, l Log) error {
	if n.err != nil {
		return n.err
	}
	if err := n.core.AddGroup(id, l); err != nil {
		return err
	}
	n.logs[id] = l
	n.views[id] = View{}
	// What is applied already is the view's from the start: a follower
	// whose log is all applied would otherwise show no high watermark
	// until the group's next entry (an idle stream after a restart).
	applied, term, hwm := n.core.appliedView(id)
	n.setView(id, func(v *View) { v.Applied, v.AppliedTerm, v.HighWatermark = applied, term, hwm })
	n.pipe.last[id] = lastIndex(l)
	n.found(id, l)
	return nil
}

// RemoveGroup stops hosting a group; its queued storage effects are
// dropped (its log is its owner's to close).
func (n *Node) RemoveGroup(id uint64) {
	n.core.RemoveGroup(id)
	delete(n.logs, id)
	delete(n.views, id)
	delete(n.installs, id)
	delete(n.retries, id)
	delete(n.durable, id)
	delete(n.pipe.installing, id)
	delete(n.pipe.last, id)
	n.pipe.queue = slices.DeleteFunc(n.pipe.queue, func(e Effect) bool {
		g, _ := EffectGroup(e)
		return g == id
	})
	if r := n.fences[id]; r != nil {
		for _, f := range append(r.cur, r.next...) {
			f.Finish(ErrShutdown)
		}
		delete(n.fences, id)
	}
}

// Groups returns the hosted group ids, sorted.
func (n *Node) Groups() []uint64 { return n.core.Groups() }

// SetDiskFull says whether the server is short of disk space
// (storage.Space): user proposals are refused meanwhile.
func (n *Node) SetDiskFull(full bool) { n.core.SetDiskFull(full) }

// Tick advances every group's logical clock by one tick.
func (n *Node) Tick() {
	failpoint.Inject("beforeTick", func() {
		failpoints.Hit("raftnode/beforeTick")
	})
	if n.err != nil {
		return
	}
	n.ticks++
	n.core.Tick()
	n.retryInstalls()
	n.paceTick()
}

// Step delivers a message from a peer.
func (n *Node) Step(group uint64, m *raftpb.Message) {
	if n.err != nil {
		return
	}
	n.paceAnswer(group, m)
	n.core.Step(group, m)
}

// Propose proposes data (UserData or a command); the outcome is a Complete
// with id.
func (n *Node) Propose(group uint64, id ProposalID, data []byte) {
	if n.err != nil {
		n.d.Complete(Complete{Group: group, ID: id, Err: n.err})
		return
	}
	n.core.Propose(group, id, data)
}

// ProposeRecords proposes the user entry data of validated v2 batches
// taking offsets offsets, in chain (Core.ProposeRecords); the outcome is a
// Complete with id.
func (n *Node) ProposeRecords(group uint64, id ProposalID, data []byte, offsets int64, chain Chain) {
	if n.err != nil {
		n.d.Complete(Complete{Group: group, ID: id, Err: n.err})
		return
	}
	n.core.ProposeRecords(group, id, data, offsets, chain)
}

// EndChain forgets a chain whose connection closed (Core.EndChain).
func (n *Node) EndChain(chain Chain) { n.core.EndChain(chain) }

// ProposeConfChange proposes a membership change; the outcome is a
// Complete with id.
func (n *Node) ProposeConfChange(group uint64, id ProposalID, cc *raftpb.ConfChangeV2) {
	if n.err != nil {
		n.d.Complete(Complete{Group: group, ID: id, Err: n.err})
		return
	}
	n.core.ProposeConfChange(group, id, cc)
}

// TransferLeader asks the group's leader to hand over to peer to.
func (n *Node) TransferLeader(group, to uint64) {
	if n.err == nil {
		n.core.TransferLeader(group, to)
	}
}

// Hello makes the groups that know no leader say hello to their replicas
// (campaign.go).
func (n *Node) Hello() {
	if n.err == nil {
		n.core.Hello()
	}
}

// Campaign starts an election in the group on this server.
func (n *Node) Campaign(group uint64) {
	if n.err == nil {
		n.core.Campaign(group)
	}
}

// ReportUnreachable tells the group a message to peer was not delivered.
func (n *Node) ReportUnreachable(group, peer uint64) {
	if n.err == nil {
		n.core.ReportUnreachable(group, peer)
	}
}

// ReportSnapshot tells the group whether a snapshot sent to peer arrived.
func (n *Node) ReportSnapshot(group, peer uint64, ok bool) {
	if n.err == nil {
		n.core.ReportSnapshot(group, peer, ok)
	}
}

// Status returns the group's full status.
func (n *Node) Status(group uint64) (GroupStatus, bool) {
	if n.err != nil {
		return GroupStatus{}, false
	}
	return n.core.Status(group)
}

// Producers returns the group's committed idempotent-producer table,
// encoded, and the index it is as of (Core.Producers).
func (n *Node) Producers(group uint64) ([]byte, uint64, bool) {
	if n.err != nil {
		return nil, 0, false
	}
	return n.core.Producers(group)
}

// View returns the group's view.
func (n *Node) View(group uint64) (View, bool) {
	v, ok := n.views[group]
	return v, ok
}

// Flush carries out the effects of the calls since the last Flush: sends,
// completions, view changes, and the storage pipeline's next steps.
func (n *Node) Flush() {
	for round := 1; n.err == nil; round++ {
		if n.cfg.Watchdog != nil {
			n.cfg.Watchdog(round)
		}
		fx := n.core.TakeEffects()
		if len(fx) == 0 && canary.On(canary.Livelock) && n.ticks >= livelockTicks {
			n.core.Tick() // broken on purpose: the loop makes its own work and never ends
			continue
		}
		if len(fx) == 0 {
			break
		}
		for _, e := range fx {
			if n.err != nil {
				break
			}
			n.route(e)
		}
	}
	n.kick()
}

func (n *Node) route(e Effect) {
	if n.cfg.OnEffect != nil {
		n.cfg.OnEffect(e)
	}
	switch e := e.(type) {
	case Send:
		n.send(e)
	case SaveConfState:
		n.pipe.queue = append(n.pipe.queue, e)
		if n.cfg.OnMembership != nil {
			n.cfg.OnMembership(e.Group, e.Conf, e.Context)
		}
	case Append, Retain, SetConfig, SaveProducers:
		n.pipe.queue = append(n.pipe.queue, e)
	case Applied:
		n.applied(e)
	case Complete:
		if e.ID&internalID != 0 {
			g := n.reads[e.ID]
			delete(n.reads, e.ID)
			n.fenceAnswer(g, e.Index, e.Err)
			return
		}
		n.d.Complete(e)
	case LeaderChanged:
		n.setView(e.Group, func(v *View) { v.Leader, v.Term, v.Role = e.Leader, e.Term, e.Role })
	}
}

func (n *Node) applied(e Applied) {
	failpoint.Inject("beforeApply", func(val failpoint.Value) {
		failpoints.Hit("raftnode/beforeApply")
		failpoints.CrashOn(val)
	})
	n.pipe.queue = append(n.pipe.queue, e) // the applied index is persisted after earlier conf states
	n.setView(e.Group, func(v *View) { v.Applied, v.AppliedTerm, v.HighWatermark = e.Index, e.Term, e.HighWatermark })
	n.fenceApplied(e.Group, e.Index)
	failpoint.Inject("afterApply", func(val failpoint.Value) {
		failpoints.Hit("raftnode/afterApply")
		failpoints.CrashOn(val)
	})
}

func (n *Node) setView(group uint64, f func(*View)) {
	v, ok := n.views[group]
	if !ok {
		return
	}
	old := v
	f(&v)
	if v != old {
		n.views[group] = v
		n.d.Publish(group, v)
	}
}

// send hands a message to the driver, unless catch-up pacing holds it
// (pace.go).
func (n *Node) send(e Send) {
	if n.paced(e) {
		return
	}
	n.sendNow(e)
}

// sendNow hands a message to the driver, past the message failpoints.
func (n *Node) sendNow(e Send) {
	if e.Msg.GetType() == raftpb.MsgSnap {
		failpoint.Inject("beforeSnapshotSend", func(val failpoint.Value) {
			failpoints.Hit("raftnode/beforeSnapshotSend")
			if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
				// As a failed snapshot transfer: raft retries later.
				n.core.ReportSnapshot(e.Group, e.Msg.GetTo(), false)
				failpoint.Return()
			}
		})
	}
	if isLeaderMsg(e.Msg.GetType()) {
		failpoint.Inject("beforeLeaderSend", func(val failpoint.Value) {
			failpoints.Hit("raftnode/beforeLeaderSend")
			if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
				failpoint.Return()
			}
		})
	} else if isFollowerMsg(e.Msg.GetType()) {
		failpoint.Inject("beforeFollowerSend", func(val failpoint.Value) {
			failpoints.Hit("raftnode/beforeFollowerSend")
			if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
				failpoint.Return()
			}
		})
	}
	failpoint.Inject("dropTo", func(val failpoint.Value) {
		failpoints.Hit("raftnode/dropTo")
		if failpoints.IsPeer(val, e.Msg.GetTo()) {
			failpoint.Return()
		}
	})
	n.d.Send(e.Group, e.Msg)
}

// isLeaderMsg reports the messages only a leader sends (log replication,
// heartbeats, snapshots, leadership transfer).
func isLeaderMsg(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgTimeoutNow:
		return true
	}
	return false
}

// isFollowerMsg reports a follower's answers to its leader.
func isFollowerMsg(t raftpb.MessageType) bool {
	return t == raftpb.MsgAppResp || t == raftpb.MsgHeartbeatResp
}

// Stop stops the node with err: every pending proposal and read ends with
// it, and the views say no one leads.
func (n *Node) Stop(err error) {
	if n.err != nil {
		return
	}
	n.err = err
	for _, c := range n.core.Shutdown(err) {
		if c.ID&internalID == 0 {
			n.d.Complete(c)
		}
	}
	n.failFences(err)
	n.reads = map[ProposalID]uint64{}
	n.pipe = newPipeline()
	n.installs, n.retries = map[uint64]*InstallJob{}, map[uint64]uint64{}
	for _, g := range sortedGroups(n.views) {
		if n.views[g] != (View{}) {
			n.views[g] = View{}
			n.d.Publish(g, View{})
		}
	}
}

// failStop stops the node after a failure it cannot continue from and
// tells the driver, which ends the process.
func (n *Node) failStop(err error) {
	if n.err != nil {
		return
	}
	n.log.Error("stopping: nothing that might not be durable is acknowledged; the process must restart", "err", err)
	n.Stop(fmt.Errorf("%w: %w", ErrStopped, err))
	n.d.Stopped(n.err)
}

// FailStop stops the node for a failure found outside it (a panic in raft,
// corruption found by a read): as a storage failure, the process must end.
func (n *Node) FailStop(err error) { n.failStop(err) }

func sortedGroups[V any](m map[uint64]V) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare)
	return ids
}
