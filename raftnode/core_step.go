package raftnode

import (
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/storage"
)

// Events from the driver: ticks, peer messages and the requests that only
// ask raft to do something (read index, leader transfer, campaign, reports).

// Tick advances every group's logical clock by one tick.
func (c *Core) Tick() {
	for _, id := range c.awakeIDs() {
		g := c.groups[id]
		g.ticks++
		if c.mayTick(g) && c.tickSuccession(g) {
			c.raw(g).Tick()
			c.drain(g)
		}
	}
	c.tickQuiescence()
}

// Step delivers a message from a peer.
func (c *Core) Step(group uint64, m *raftpb.Message) {
	if group == LivenessGroup {
		c.stepLiveness(m)
		return
	}
	g, ok := c.groups[group]
	if !ok {
		return
	}
	if !fromNetwork(m.GetType()) {
		return // local messages, and requests VDL never forwards (proposals, read indexes)
	}
	if err := checkEntries(m); err != nil {
		c.cfg.Logger.Warningf("raftnode: group %d: dropping %v from %d: %v", group, m.GetType(), m.GetFrom(), err)
		return
	}
	if err := checkCommit(g, m); err != nil && !canary.On(canary.QueueAnyDir) {
		c.cfg.Logger.Warningf("raftnode: group %d: dropping %v from %d: %v", group, m.GetType(), m.GetFrom(), err)
		return
	}
	if g.heard == nil {
		g.heard = map[uint64]uint64{}
	}
	c.syncTicks(g)
	g.heard[m.GetFrom()] = g.ticks
	c.heardFrom(m.GetFrom())
	if c.stepSuccession(g, m) {
		return
	}
	c.noteBehind(g, m)
	if isHello(m) {
		c.stepHello(g)
		return
	}
	if isQuiesce(m) {
		c.stepQuiesce(g, m)
		return
	}
	if c.stepQuiet(g, m) {
		return
	}
	succeed := c.succeedOnPreVote(g, m)
	c.wake(g)
	succeed()
	_ = c.raw(g).Step(m) // peer-not-found and stale messages are dropped, as raft intends
	c.drain(g)
}

// fromNetwork reports whether peers may send a message of type t. Local
// messages never come from the network; proposals, read indexes and
// leadership transfer requests are never forwarded between VDL servers
// (clients and operators are redirected to the leader), so those from the
// network are forged.
func fromNetwork(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MsgApp, raftpb.MsgAppResp, raftpb.MsgVote, raftpb.MsgVoteResp, raftpb.MsgPreVote, raftpb.MsgPreVoteResp,
		raftpb.MsgSnap, raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp, raftpb.MsgTimeoutNow:
		return true
	}
	return false
}

// checkEntries checks that every entry a message carries can be stored
// and applied: raft would otherwise hand the storage an entry that stops
// the server.
func checkEntries(m *raftpb.Message) error {
	for _, e := range m.GetEntries() {
		if err := storage.CheckEntry(e); err != nil {
			return err
		}
		if _, err := confChangeOf(e); err != nil {
			return fmt.Errorf("entry %d: malformed membership change: %w", e.GetIndex(), err)
		}
	}
	return nil
}

// checkCommit refuses a heartbeat that commits past this replica's log.
// A leader sends a follower the smaller of its commit index and what the
// follower acknowledged, and a follower acknowledges only what it wrote,
// so such a heartbeat was decided for a log this server no longer has: a
// group removed from it and hosted again since (the same data dir, an
// empty log), the message held in the sender's transport queue across
// both (simulator seed 6800 with the control plane: a stale leader's
// heartbeat, queued 2.7 s while the server was down, reached the group
// hosted anew). raft would stop the server ("tocommit(13) is out of range
// [lastIndex(0)]"); dropped, it is a lost message.
func checkCommit(g *group, m *raftpb.Message) error {
	if m.GetType() != raftpb.MsgHeartbeat {
		return nil
	}
	last, err := g.st.LastIndex()
	if err != nil || m.GetCommit() <= last {
		return nil
	}
	return fmt.Errorf("it commits %d, past this log's last index %d: decided for a log this server no longer has", m.GetCommit(), last)
}

// ReadIndex asks the group's leader to confirm it still leads (a heartbeat
// round with a quorum). The result is a Complete with the same id whose
// Index is the read index: once the group has applied it, a read of the
// local state is linearizable. Fails with ErrNotLeader on a follower or
// when leadership changes first.
func (c *Core) ReadIndex(group uint64, id ProposalID) {
	g, ok := c.groups[group]
	if !ok {
		c.emit(Complete{Group: group, ID: id, Err: ErrUnknownGroup})
		return
	}
	if g.role != raft.StateLeader {
		c.emit(Complete{Group: group, ID: id, Err: ErrNotLeader})
		return
	}
	c.wake(g) // the round needs ticks for its heartbeats to be resent
	var ctx [8]byte
	binary.BigEndian.PutUint64(ctx[:], uint64(id))
	g.reads = append(g.reads, id)
	c.raw(g).ReadIndex(ctx[:])
	c.drain(g)
}

// TransferLeader asks the group's leader to hand leadership to peer to.
func (c *Core) TransferLeader(group, to uint64) {
	if g, ok := c.groups[group]; ok {
		c.wake(g)
		c.raw(g).TransferLeader(to)
		c.drain(g)
	}
}

// Campaign makes this server start an election in the group now.
func (c *Core) Campaign(group uint64) {
	if g, ok := c.groups[group]; ok {
		c.wake(g)
		_ = c.raw(g).Campaign()
		c.drain(g)
	}
}

// ReportUnreachable tells raft a message to peer could not be delivered
// (for LivenessGroup: the quiesced groups that depend on peer wake).
func (c *Core) ReportUnreachable(group, peer uint64) {
	if group == LivenessGroup {
		c.wakePeer(peer) // the transport lost the peer: do not wait for its silence
		return
	}
	if g, ok := c.groups[group]; ok {
		if q := c.q.quiet[group]; q != nil && slices.Contains(q.dead, peer) {
			// A message sent to it before the group went to sleep without
			// it: waking would heartbeat the dead replica again, whose
			// failure would wake the group again, for as long as it is down.
			return
		}
		c.wake(g)
		c.raw(g).ReportUnreachable(peer)
		c.drain(g)
	}
}

// ReportSnapshot tells raft whether sending a snapshot to peer succeeded.
func (c *Core) ReportSnapshot(group, peer uint64, ok bool) {
	if g, found := c.groups[group]; found {
		st := raft.SnapshotFinish
		if !ok {
			st = raft.SnapshotFailure
		}
		c.wake(g)
		c.raw(g).ReportSnapshot(peer, st)
		c.drain(g)
	}
}
