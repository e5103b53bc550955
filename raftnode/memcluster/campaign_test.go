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
	cfg := Config{Seed: 1, Nodes: []uint64{1, 2, 3}}
	cfg.Core.MaxCampaigns = bound
	for g := uint64(1); g <= groups; g++ {
		cfg.Groups = append(cfg.Groups, g)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s := &scenario{c: c}
	ok, err := c.RunUntil(200000, s.settled)
	require.NoError(t, err)
	require.True(t, ok, s.unsettled())

	for _, nd := range c.Nodes() {
		c.Crash(nd.ID)
	}
	for _, nd := range c.Nodes() {
		require.NoError(t, c.Restart(nd.ID))
	}
	most := 0
	ok, err = c.RunUntil(200000, func() bool {
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
