package raftnode

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Hibernation: a quiesced follower drops its RawNode (TiKV hibernates its
// regions likewise). Asleep, a group's raft state changes nothing, and
// its RawNode — the raft state machine, its log's view, a progress
// tracker with an inflight window per replica, configuration copies — was
// a third of the objects an idle stream kept on a server, marked by the
// collector at every cycle (beside 10,000 idle streams, 4–6% of a hot
// load's CPU). Two thirds of an idle stream's replicas are followers.
//
// A follower's RawNode goes at the tick after its group quiesced, when
// nothing of the group is in flight (no append being written, no Ready
// held, no read, no proposal, no succession) and its log holds exactly
// raft's state (the hard state and the membership: a membership change
// applied is written by the pipeline after its effect). Anything that
// needs raft again — a peer's message, a wake, a campaign or transfer, a
// status not cached — rebuilds it first (raw): from the log, as a restart
// would, then told its leader by a heartbeat from it in its term (raft
// knows no leader after a restart, and a follower that knows none grants
// any candidate's pre-vote: a replica coming back would disrupt a leader
// that is alive). The heartbeat's answer is dropped: it says nothing the
// leader does not know. A group rebuilt and still asleep goes back to
// hibernation at the next tick.
//
// The rebuilt raft differs from the one dropped only in its election
// clock (0, and a new randomized timeout): as if the leader's heartbeat
// had just arrived. Everything is decided here, in group order.

// raw is the group's RawNode, rebuilt first if the group hibernates.
func (c *Core) raw(g *group) *raft.RawNode {
	if g.rn == nil {
		c.rouse(g)
	}
	return g.rn
}

// rouse rebuilds a hibernating group's RawNode from its log and tells it
// its leader; the group stays quiesced.
func (c *Core) rouse(g *group) {
	q := c.q.quiet[g.id]
	if q == nil || q.leader {
		panic(fmt.Sprintf("raftnode: group %d: hibernating but not a quiesced follower", g.id))
	}
	rn, err := c.newRawNode(g.st, g.applied)
	if err != nil { // the log is open while the group is hosted, and answers from memory
		panic(fmt.Sprintf("raftnode: group %d: rebuilding its raft from its log: %v", g.id, err))
	}
	bs := rn.BasicStatus()
	_ = rn.Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(q.lead), To: new(c.cfg.ID),
		Term: new(bs.GetTerm()), Commit: new(bs.GetCommit())})
	rd := rn.Ready()
	assertRoused(g.id, q.lead, rn, rd)
	if c.cfg.SyncWrites {
		rn.Advance(rd)
	}
	g.rn = rn
	c.q.drowsy[g.id] = struct{}{}
}

// assertRoused: the heartbeat told the rebuilt raft its leader and nothing
// else; what it produced is that leader and the heartbeat's answer.
func assertRoused(id, lead uint64, rn *raft.RawNode, rd raft.Ready) {
	answer := len(rd.Messages) == 1 && rd.Messages[0].GetType() == raftpb.MsgHeartbeatResp && rd.Messages[0].GetTo() == lead
	if rn.BasicStatus().Lead != lead || !answer || len(rd.Entries) > 0 || len(rd.CommittedEntries) > 0 ||
		!raft.IsEmptyHardState(rd.HardState) || !raft.IsEmptySnap(rd.Snapshot) || len(rd.ReadStates) > 0 {
		panic(fmt.Sprintf("raftnode: group %d: its raft, rebuilt and told its leader %d, leads to %d and wants %d messages, %d entries to write, %d to apply",
			id, lead, rn.BasicStatus().Lead, len(rd.Messages), len(rd.Entries), len(rd.CommittedEntries)))
	}
}

// hibernateDrowsy drops the RawNodes of the followers quiesced or roused
// since the last tick, those that may sleep without one; the others are
// tried again at the next tick.
func (c *Core) hibernateDrowsy() {
	if len(c.q.drowsy) == 0 {
		return
	}
	for _, id := range sortedGroups(c.q.drowsy) {
		g, q := c.groups[id], c.q.quiet[id]
		switch {
		case g == nil || q == nil || q.leader || g.rn == nil || c.cfg.NoHibernate:
			delete(c.q.drowsy, id)
		case c.mayHibernate(g, q):
			if q.status == nil {
				s := c.status(g) // asked every report: answered from it while asleep
				q.status = &s
			}
			g.rn = nil
			delete(c.q.drowsy, id)
		}
	}
}

// mayHibernate reports whether a quiesced follower may drop its RawNode:
// nothing of it in flight, and its log holds raft's hard state and
// membership (what rouse rebuilds it from).
func (c *Core) mayHibernate(g *group, q *quietGroup) bool {
	if g.role != raft.StateFollower || g.lead != q.lead || g.appending > 0 || g.waiting != nil || len(g.reads) > 0 ||
		len(g.queued) > 0 || len(g.pending) > 0 || g.succ != nil || g.rn.HasReady() {
		return false
	}
	bs := g.rn.BasicStatus()
	if bs.Lead != q.lead || bs.GetCommit() != g.applied || bs.LeadTransferee != 0 {
		return false
	}
	hs, cs, err := g.st.InitialState()
	if err != nil || hs.GetTerm() != bs.GetTerm() || hs.GetVote() != bs.GetVote() || hs.GetCommit() != bs.GetCommit() {
		return false
	}
	return sameMembership(g.rn.Status().Config, cs)
}

// sameMembership reports whether raft's configuration is the one cs
// describes.
func sameMembership(cfg tracker.Config, cs *raftpb.ConfState) bool {
	same := func(m quorum.MajorityConfig, s []uint64) bool { // Slice is sorted
		return slices.Equal(m.Slice(), slices.Sorted(slices.Values(s)))
	}
	return same(cfg.Voters[0], cs.GetVoters()) && same(cfg.Voters[1], cs.GetVotersOutgoing()) &&
		same(cfg.Learners, cs.GetLearners()) && same(cfg.LearnersNext, cs.GetLearnersNext()) &&
		cfg.AutoLeave == cs.GetAutoLeave()
}

// Hibernating reports whether a group's RawNode is dropped (tests).
func (c *Core) Hibernating(group uint64) bool {
	g := c.groups[group]
	return g != nil && g.rn == nil
}

// Hibernating reports whether the group's RawNode is dropped (tests).
func (n *Node) Hibernating(group uint64) bool { return n.err == nil && n.core.Hibernating(group) }
