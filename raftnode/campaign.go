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
// (every follower of a dead server's groups times out at once). Past the
// bound, the groups campaigning share the clock: each ticks once every
// campaigns/bound ticks, so their rounds together take the time the
// bound's would. And the bound itself follows the outcomes
// (electionPace): halved when a candidate times out, raised by one with
// every win. Which groups wait is decided in group order, as everything
// in the core.
//
// At scale each part matters (memcluster's TestRestartWithSlowSyncs: on
// disks that fsync ~30 logs an election timeout, one of three servers
// stops and comes back among 300 groups). Before, the groups were never
// all led again, terms in the hundreds: every round outlasted the
// timeouts. The stretch alone took 423-2,906 ticks; the adaptive bound
// alone never settled; both, with 900 groups, still left a few groups
// unled for good, their votes queued behind thousands of fsyncs of
// pre-vote answers, which now cost none (pipeline.go, durable). All
// three: 86-156 ticks with 300 groups, 121-328 with 900, a few terms.

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
	term := c.raw(g).BasicStatus().GetTerm()
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

// electionPace adapts the campaign bound to what the servers carry, as
// TCP does its window: every election this server wins raises it by one,
// up to Config.MaxCampaigns; a candidate that times out halves it, at most
// once an election timeout; once no group of the server campaigns, it is
// Config.MaxCampaigns again. An election round costs a sync per vote on
// every replica; with as many campaigns as the bound allows and a slow
// disk, the rounds outlast the election timeout and time out, each only
// to start again (a livelock). With the bound halved until rounds finish
// in time, elections win again, and the bound grows back as they do.
type electionPace struct {
	limit int    // the bound now
	next  uint64 // the server's tick from which it may be halved again
}

// CampaignBound returns the campaign bound now (-1: unbounded).
func (c *Core) CampaignBound() int {
	if c.cfg.MaxCampaigns < 0 {
		return -1
	}
	return c.elections.limit
}

// CampaignBound returns the core's campaign bound now (-1: unbounded or
// stopped).
func (n *Node) CampaignBound() int {
	if n.err != nil {
		return -1
	}
	return n.core.CampaignBound()
}

// atBound reports whether the server's campaigns have reached the bound.
func (c *Core) atBound() bool {
	return c.cfg.MaxCampaigns >= 0 && c.campaigns >= c.elections.limit
}

// noteRole records a group's new raft state, keeps the campaign count and
// paces elections by their outcome.
func (c *Core) noteRole(g *group, s raft.StateType) {
	p := &c.elections
	switch {
	case c.cfg.MaxCampaigns < 0 || g.role != raft.StateCandidate:
	case s == raft.StateLeader:
		p.limit = min(p.limit+1, c.cfg.MaxCampaigns)
	case s == raft.StatePreCandidate && c.q.ticks >= p.next: // the election timed out
		p.limit, p.next = max(p.limit/2, 1), c.q.ticks+uint64(c.cfg.ElectionTick)
	}
	if campaigning(g.role) {
		c.campaigns--
	}
	if campaigning(s) {
		c.campaigns++
	}
	if c.campaigns == 0 {
		p.limit = c.cfg.MaxCampaigns // no election left: the storm, if any, is over
	}
	if s != g.role {
		g.ahead = false
	}
	g.role = s
}

// noteBehind lets a follower that knows no leader run past the bound when
// it refuses a campaign for a log behind its own. That campaign cannot win
// its vote, and may hold the only place its server has under the bound
// while this server's place is held the same way by a group where this one
// is behind: with the third replica down, neither group would ever elect
// (TestCampaignsBehindDoNotDeadlock; simulator seed 331 with one campaign
// a server). The replica ahead is the one that can win.
func (c *Core) noteBehind(g *group, m *raftpb.Message) {
	t := m.GetType()
	if (t == raftpb.MsgPreVote || t == raftpb.MsgVote) && g.role == raft.StateFollower && g.lead == 0 && !c.upToDate(g, m) {
		g.ahead = true
	}
}

// mayTick reports whether a group's raft may tick now. Below the bound,
// every group ticks. At or past it, a follower that knows no leader waits,
// and a group running an election ticks once every campaigns/bound ticks
// (rounded up): its election timeout stretches with the server's load.
// Past the bound (followers of a dead leader time out together), an
// election round — pre-votes, votes, each vote a sync — takes longer than
// an election timeout, every candidate times out before its answers come
// and starts again, and nothing is ever elected (a livelock: memcluster's
// TestRestartWithSlowSyncs). Stretched, the rounds of all the elections
// together take the time the bound's would.
func (c *Core) mayTick(g *group) bool {
	switch {
	case !c.atBound() || g.role == raft.StateLeader:
		return true
	case g.role == raft.StateFollower:
		return g.lead != 0 || g.ahead
	}
	bound := c.elections.limit
	stretch := uint64((c.campaigns + bound - 1) / bound)
	return (g.ticks+g.id)%stretch == 0
}
