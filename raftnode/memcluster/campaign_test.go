package memcluster

import (
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
	cryptotest.SetGlobalRandom(t, 1)
	c := quiescedCluster(t, 3)
	l := c.Leader(1)
	require.NotNil(t, l)
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
