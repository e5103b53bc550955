package raftnode

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Succession: when a leader's server falls silent, the replicas left elect
// its successor in an order they all agree on, instead of each campaigning
// at a random time. With two replicas left, a random election timeout each
// is a split vote whenever the two fire within a message round trip of
// each other; when one server stops, thousands of its groups elect at once
// on the two left, a round trip takes as long as the spread of the
// timeouts, and split votes were the rule: new terms and rounds again, for
// tens of seconds at 10,000 streams.
//
// So the first voter in id order other than the silent leader campaigns
// as soon as the lease of the old leader is over (when raft grants votes
// again), as its server's campaign bound allows (campaign.go: a server
// whose leader peer stops has thousands of groups to take over, and all
// at once, with their pre-votes, votes and syncs, was an election storm
// of its own); the others stop their election clocks at the lease's end
// for successionHold election timeouts, and vote for it meanwhile. If it
// is gone too, they elect as raft always does, that much later.
// A sleeping follower woken by the first successor's pre-vote takes its
// place in the succession too. A group that hears from the silent leader
// or learns another forgets its place.

// successionHold is how many election timeouts after the lease's end the
// succession lasts. Three (time for a server's campaign bound to work
// through thousands of groups) restarted a 10,000-stream server no faster
// than one in the one run each that was measured (24 s and 23 s).
const successionHold = 1

// successionRetry is how many ticks apart a first successor sends its
// pre-votes again while they are not granted (the others' leases may end
// a tick or two after its own, and a replica in its lease ignores them).
const successionRetry = 2

// succession is a follower's place in the succession of a silent leader,
// in the group's ticks.
type succession struct {
	from uint64 // the silent leader
	// at is when the lease of from is over: the first successor
	// campaigns from then until it leads or hold, the others hold their
	// election clock until hold.
	at, hold uint64
	first    bool   // this replica is the first successor
	firstID  uint64 // the first successor
}

// succeed gives a follower of a leader whose server fell silent its place
// in the succession; silent is how long the leader has been silent as far
// as the group's election clock knows (a woken group's was moved on by
// that much, at most an election timeout; an awake group's ran on).
func (c *Core) succeed(g *group, leader, silent uint64) {
	if g.role != raft.StateFollower || g.lead != leader || g.succ != nil {
		return
	}
	first := firstSuccessor(c.raw(g), leader)
	et := uint64(c.cfg.ElectionTick)
	at := g.ticks + et - min(silent, et)
	g.succ = &succession{from: leader, at: at, hold: at + successionHold*et, first: first == c.cfg.ID, firstID: first}
	c.tickSuccession(g)
}

// succeedAwake gives an awake follower of peer its place in the
// succession: its election clock ran on since it last heard from peer.
func (c *Core) succeedAwake(g *group, peer uint64) {
	if h, ok := g.heard[peer]; ok {
		c.succeed(g, peer, g.ticks-h)
	}
}

// firstSuccessor is the first voter of the group in id order other than
// leader.
func firstSuccessor(rn *raft.RawNode, leader uint64) uint64 {
	first := uint64(0)
	rn.WithProgress(func(id uint64, typ raft.ProgressType, _ tracker.Progress) { // in id order
		if typ == raft.ProgressTypePeer && id != leader && first == 0 {
			first = id
		}
	})
	return first
}

// stepSuccession looks at a message for a group in a succession before
// raft steps it, and reports whether to drop it. The silent leader heard
// from again ends the succession. The first successor drops the others'
// pre-votes: one whose own election clock fired with the lease's end
// would otherwise win its pre-vote from the first while the first wins
// its own from it, and both would be candidates of the same term (a split
// vote); dropped, its pre-vote fails, and it votes for the first. (A lost
// message is always safe.) The others stop waiting for a first successor
// whose pre-vote shows a log behind theirs: it cannot win their vote; and
// a first successor whose pre-vote is refused stops trying first.
func (c *Core) stepSuccession(g *group, m *raftpb.Message) bool {
	s := g.succ
	switch {
	case s == nil:
	case m.GetFrom() == s.from:
		g.succ = nil
	case s.first && m.GetType() == raftpb.MsgPreVoteResp && m.GetReject():
		g.succ = nil // it cannot win: raft elects as always
	case m.GetType() != raftpb.MsgPreVote:
	case s.first:
		return true
	case m.GetFrom() == s.firstID && !c.upToDate(g, m):
		g.succ = nil
	}
	return false
}

// upToDate reports whether a candidate's log, as its vote request says,
// is at least as up to date as this replica's (raft's rule for a vote).
func (c *Core) upToDate(g *group, m *raftpb.Message) bool {
	last, err := g.st.LastIndex()
	if err != nil {
		return false
	}
	term, err := g.st.Term(last)
	if err != nil {
		return false
	}
	return m.GetLogTerm() > term || (m.GetLogTerm() == term && m.GetIndex() >= last)
}

// succeedOnPreVote gives a sleeping follower woken by the first
// successor's pre-vote its place in the succession: the first's lease of
// the leader is over, and this server may not have noticed the leader's
// silence yet (or ever, once no sleeping group depends on it). Not on
// anyone else's: a replica cut off for a while, or one being replaced,
// campaigns on its own, and a group whose leader is alive would then
// hold its clocks and elect the first successor for nothing. Called
// before the wake.
func (c *Core) succeedOnPreVote(g *group, m *raftpb.Message) func() {
	q := c.q.quiet[g.id]
	if q == nil || q.leader || m.GetType() != raftpb.MsgPreVote || m.GetFrom() != firstSuccessor(c.raw(g), q.lead) {
		return func() {}
	}
	h, ok := c.q.heard[q.lead]
	if !ok {
		return func() {} // wake moves no clock on: its lease runs as raft's
	}
	return func() { c.succeed(g, q.lead, c.q.ticks-h) }
}

// tickSuccession runs at every tick of a group in a succession, before
// raft's tick, and reports whether raft may tick.
func (c *Core) tickSuccession(g *group) bool {
	s := g.succ
	if s == nil {
		return true
	}
	if g.ticks >= s.hold || g.role == raft.StateLeader || (g.lead != s.from && g.lead != 0) {
		g.succ = nil // over, or a leader is known
		return true
	}
	switch {
	case g.ticks < s.at || (!s.first && g.ticks == s.at):
		return true // the others' election clocks reach the lease's end
	case !s.first:
		return g.role != raft.StateFollower // hold the clock; an election under way goes on
	case g.role == raft.StateCandidate:
		return true // past the pre-vote: the election runs to its end
	case (g.ticks-s.at)%successionRetry != 0:
	case g.role == raft.StatePreCandidate || !c.atBound():
		_ = c.raw(g).Campaign() // again, for a pre-candidate: its pre-votes may have come before the others' leases ended
		c.drain(g)
	}
	return false
}
