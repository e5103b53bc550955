package raftnode

import "go.etcd.io/raft/v3"

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
