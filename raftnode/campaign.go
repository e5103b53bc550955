package raftnode

import (
	"bytes"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Campaign pacing: a server starts at most Config.MaxCampaigns elections
// of its own at once.
//
// Without a bound, a server that comes back with thousands of groups, or
// servers whose leaders stepped down together (CheckQuorum under a load
// that delayed their followers' answers past an election timeout), start
// as many elections at once. Each round of each costs messages, and a vote
// a HardState sync; once the rounds take longer than an election timeout,
// every candidate times out before its votes arrive and starts over, and
// the replica set stays without leaders for good (BenchmarkStreams at
// 10,000 streams: every group of all three servers a pre-candidate ten
// minutes after one server's restart). With the bound, elections finish
// at the rate the servers can carry, and the rest wait their turn.
//
// Only a follower that knows no leader waits: its election clock stands
// still while the bound is reached. It still votes (knowing no leader, it
// is in no lease that would make it ignore a candidate) and still learns a
// leader from its heartbeat. A follower that knows its leader always ticks,
// so a dead leader is noticed on time, and groups already campaigning go
// on to the end of their election; both may take the count past the bound
// for a while. Which groups wait is decided in group order, as everything
// in the core.

// A group starting on a server says hello to its other replicas, so that
// a restarted server learns its leaders without elections: the leader of
// a group that went to sleep without this replica (its server was down)
// hears from it only when it speaks, and a follower that knows no leader
// speaks only when its election timeout sends a pre-vote, up to two
// election timeouts after the start, and later still while the campaigns
// are at the bound. The hello is a MsgHeartbeatResp marked helloCtx that
// the core handles itself (raft never sees it): a quiesced leader wakes
// and heartbeats the replica, which then knows its leader. Anywhere else
// it changes nothing. (At 10,000 streams a restarted server's groups all
// knew their leader 65 s after its restart without it.)

// helloCtx marks a hello; its length differs from a read index context's.
var helloCtx = []byte("vdl/hello")

// isHello reports whether m is a hello.
func isHello(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MsgHeartbeatResp && bytes.Equal(m.GetContext(), helloCtx)
}

// hello sends a group's hello to its other replicas, if the group ever
// elected a leader (a bootstrapped group starts in term 1, and has none to
// find).
func (c *Core) hello(g *group) {
	term := g.rn.BasicStatus().GetTerm()
	if c.cfg.NoHello || term <= 1 {
		return
	}
	for _, id := range c.members(g.id) {
		if id != c.cfg.ID {
			c.emit(Send{Group: g.id, Msg: &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(c.cfg.ID), To: new(id),
				Term: new(term), Context: helloCtx}})
		}
	}
}

// Hello makes every group that knows no leader say hello again: a server
// hosts its streams before its peer transport starts, so the hellos of
// AddGroup may find no way out.
func (c *Core) Hello() {
	for _, id := range c.ids {
		if g := c.groups[id]; g.lead == 0 {
			c.hello(g)
		}
	}
}

// stepHello wakes a quiesced leader that hears a replica's hello.
func (c *Core) stepHello(g *group) {
	if q := c.q.quiet[g.id]; q != nil && q.leader {
		c.wake(g)
	}
}

// campaigning reports whether a group in state s is running an election.
func campaigning(s raft.StateType) bool {
	return s == raft.StatePreCandidate || s == raft.StateCandidate
}

// noteRole records a group's new raft state and keeps the campaign count.
func (c *Core) noteRole(g *group, s raft.StateType) {
	if campaigning(g.role) {
		c.campaigns--
	}
	if campaigning(s) {
		c.campaigns++
	}
	g.role = s
}

// mayTick reports whether a group's raft may tick now: not a follower
// that knows no leader while the server's campaigns are at the bound.
func (c *Core) mayTick(g *group) bool {
	return c.cfg.MaxCampaigns < 0 || c.campaigns < c.cfg.MaxCampaigns ||
		g.role != raft.StateFollower || g.lead != 0
}
