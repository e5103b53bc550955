package memcluster

import (
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
)

// TestCampaignsArePaced: servers that all come back at once, each with
// every group knowing no leader, start at most MaxCampaigns elections each
// at a time, and every group still gets a leader.
func TestCampaignsArePaced(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	const groups, bound = 40, 4
	c := quiescedCluster(t, groups, func(cfg *Config) { cfg.Core.MaxCampaigns = bound })
	cfg := c.cfg

	for _, nd := range c.Nodes() {
		c.Crash(nd.ID)
	}
	for _, nd := range c.Nodes() {
		require.NoError(t, c.Restart(nd.ID))
	}
	most := 0
	ok, err := c.RunUntil(200000, func() bool {
		led := 0
		for _, nd := range c.Nodes() {
			n := 0
			for _, g := range cfg.Groups {
				st, _ := nd.Raft.Status(g)
				if st.Role == "StatePreCandidate" || st.Role == "StateCandidate" {
					n++
				}
			}
			most = max(most, n)
			require.LessOrEqual(t, n, bound, "n%d: groups campaigning at once", nd.ID)
		}
		for _, g := range cfg.Groups {
			if c.Leader(g) != nil {
				led++
			}
		}
		return led == groups
	})
	require.NoError(t, err)
	require.True(t, ok, "every group led again")
	require.Equal(t, bound, most, "elections ran up to the bound")
}

// downWhileLeaderSleeps crashes a follower of group 1 in a quiesced
// cluster and runs until the leader sleeps without it; it returns the
// cluster, the leader and the crashed node's id.
func downWhileLeaderSleeps(t *testing.T) (*Cluster, *Node, uint64) {
	c, l := quiescedLed(t, 3, 1)
	var back uint64
	for _, nd := range c.Nodes() {
		if nd.ID != l.ID {
			back = nd.ID
		}
	}
	c.Crash(back)
	require.NoError(t, c.Run(3*electionTick*c.cfg.TickEvery))
	require.True(t, l.Raft.Quiesced(1), "asleep without the replica that is down")
	return c, l, back
}

// requireLeaderKnownSoon checks that node back learns that l leads group 1
// within half an election timeout: before its first pre-vote could.
func requireLeaderKnownSoon(t *testing.T, c *Cluster, l *Node, back uint64) {
	ok, err := c.RunUntil(electionTick/2*c.cfg.TickEvery, func() bool {
		st, _ := c.Node(back).Raft.Status(1)
		return st.Leader == l.ID
	})
	require.NoError(t, err)
	require.True(t, ok, "the restarted replica knows its leader within half an election timeout")
}

// TestRestartedReplicaSaysHello: a server restarted after its groups' leaders
// went to sleep without it learns those leaders within a few ticks, by its
// hello, not an election timeout later by its pre-vote (nor later still
// while campaigns are at the bound).
func TestRestartedReplicaSaysHello(t *testing.T) {
	c, l, back := downWhileLeaderSleeps(t)
	require.NoError(t, c.Restart(back))
	requireLeaderKnownSoon(t, c, l, back)
}

// TestHelloAgainOnceConnected: the hellos a restarted server's groups sent
// before it could reach its peers (a server hosts its streams before its
// transport starts) are said again by Hello, and the leaders answer.
func TestHelloAgainOnceConnected(t *testing.T) {
	c, l, back := downWhileLeaderSleeps(t)
	c.Isolate(back)
	require.NoError(t, c.Restart(back))
	require.NoError(t, c.Run(1)) // the first hellos are lost
	c.Heal()
	c.Node(back).Raft.Hello()
	c.Node(back).Raft.Flush()
	requireLeaderKnownSoon(t, c, l, back)
}

// TestRestartWithSlowSyncs: a server leading a third of many groups stops
// and comes back while the two left are taking its groups over, on disks
// that take a step per fsynced log (about 30 fsyncs an election timeout
// for 300 groups). Every group is led again within 30 election timeouts,
// in a few terms. Before campaigns stretched their clocks past the bound,
// the bound adapted to elections that time out, and pre-vote answers
// stopped costing an fsync each, the rounds outlasted the timeouts and the
// groups never got a leader (terms in the hundreds).
func TestRestartWithSlowSyncs(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		for _, back := range []int{0, 10, 20} { // ticks after the stop: within the succession
			t.Run(fmt.Sprintf("seed %d back after %d ticks", seed, back), func(t *testing.T) {
				restartWithSlowSyncs(t, seed, back)
			})
		}
	}
}

func restartWithSlowSyncs(t *testing.T, seed uint64, back int) {
	cryptotest.SetGlobalRandom(t, seed)
	const groups, bound = 300, 16
	c := quiescedCluster(t, groups, func(cfg *Config) { cfg.Seed, cfg.Core.MaxCampaigns = seed, bound })
	c.cfg.SyncLogsPerStep = 1
	c.cfg.Delay = 0.5
	var before uint64
	for _, g := range c.cfg.Groups {
		l := c.Leader(g)
		st, _ := l.Raft.Status(g)
		before = max(before, st.Term)
	}
	c.Crash(3)
	require.NoError(t, c.Run(back*c.cfg.TickEvery))
	require.NoError(t, c.Restart(3))
	least := bound
	ok, err := c.RunUntil(30*electionTick*c.cfg.TickEvery, func() bool {
		for _, nd := range c.Nodes() {
			least = min(least, nd.Raft.CampaignBound())
		}
		for _, g := range c.cfg.Groups {
			if c.Leader(g) == nil {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	var after uint64
	for _, g := range c.cfg.Groups {
		for _, nd := range c.Nodes() {
			st, _ := nd.Raft.Status(g)
			after = max(after, st.Term)
		}
	}
	require.True(t, ok, "every group led again within 30 election timeouts (terms %d -> %d)", before, after)
	require.LessOrEqual(t, after, before+6, "terms")
	if back > 0 { // returning at once, it meets no election in progress
		require.Less(t, least, bound, "elections timed out, and the bound went down")
	}
	ok, err = c.RunUntil(10*electionTick*c.cfg.TickEvery, func() bool {
		for _, nd := range c.Nodes() {
			if nd.Raft.CampaignBound() != bound {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "the bound is back once elections are over")
	t.Logf("terms %d -> %d, the bound went down to %d", before, after, least)
}

// TestCampaignsBehindDoNotDeadlock: with a bound of one campaign, the only
// replicas left of two groups each campaign in the group where their log
// is behind: each is refused by the other, whose follower there knows no
// leader and waited for the bound, and nothing else answers (the third
// server is down). The replica whose log is ahead runs anyway, wins, and
// frees its server's place; before, neither ever did.
func TestCampaignsBehindDoNotDeadlock(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c := quiescedCluster(t, 2, func(cfg *Config) { cfg.Core.MaxCampaigns = 1 })
	lead := func(g, id uint64) {
		if l := c.Leader(g); l.ID != id {
			l.Raft.TransferLeader(g, id)
			l.Raft.Flush()
		}
		ok, err := c.RunUntil(200*c.cfg.TickEvery, func() bool { l := c.Leader(g); return l != nil && l.ID == id })
		require.NoError(t, err)
		require.True(t, ok, "n%d leads g%d", id, g)
	}
	lead(1, 3)
	lead(2, 2)
	c.Crash(1)
	c.Partition(2, 3)
	c.Propose(c.Node(3), 1, []byte("only on n3")) // n2 falls behind in g1
	c.Propose(c.Node(2), 2, []byte("only on n2")) // n3 falls behind in g2
	ok, err := c.RunUntil(10*electionTick*c.cfg.TickEvery, func() bool { return c.Leader(1) == nil && c.Leader(2) == nil })
	require.NoError(t, err)
	require.True(t, ok, "the leaders step down, cut off")
	c.Heal()
	ok, err = c.RunUntil(20*electionTick*c.cfg.TickEvery, func() bool { return c.Leader(1) != nil && c.Leader(2) != nil })
	require.NoError(t, err)
	require.True(t, ok, "both groups led again")
	require.Equal(t, uint64(3), c.Leader(1).ID)
	require.Equal(t, uint64(2), c.Leader(2).ID)
}
