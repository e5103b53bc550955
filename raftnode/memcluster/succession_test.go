package memcluster

import (
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
)

// TestSuccessionWithoutSplitVotes: the server leading many sleeping groups
// stops, with messages slow enough that a round trip takes ticks. The two
// servers left elect a new leader for each of its groups in one election,
// not in rounds of split votes: the first of them in id order.
func TestSuccessionWithoutSplitVotes(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { succession(t, seed) })
	}
}

func succession(t *testing.T, seed uint64) {
	cryptotest.SetGlobalRandom(t, seed)
	const groups = 60
	c := quiescedCluster(t, groups, func(cfg *Config) { cfg.Seed = seed })
	c.cfg.Delay = 0.85 // from now on: a message waits about 2 ticks
	cfg := c.cfg
	count := map[uint64]int{}
	for _, g := range cfg.Groups {
		count[c.Leader(g).ID]++
	}
	var dead uint64
	for id, n := range count {
		if dead == 0 || n > count[dead] || (n == count[dead] && id < dead) {
			dead = id
		}
	}
	var led []uint64
	for _, g := range cfg.Groups {
		if c.Leader(g).ID == dead {
			led = append(led, g)
		}
	}
	require.GreaterOrEqual(t, len(led), groups/3)
	first := uint64(0)
	for _, n := range c.Nodes() {
		if n.ID != dead && (first == 0 || n.ID < first) {
			first = n.ID
		}
	}
	c.Crash(dead)
	rivals := map[uint64]bool{} // groups where another than first stood as candidate
	ok, err := c.RunUntil(400000, func() bool {
		done := true
		for _, g := range led {
			for _, n := range c.Nodes() {
				if n.ID == first || n.Down {
					continue
				}
				if st, _ := n.Raft.Status(g); st.Role == "StateCandidate" {
					rivals[g] = true
				}
			}
			if l := c.Leader(g); l == nil || l.ID == dead {
				done = false
			}
		}
		return done
	})
	require.NoError(t, err)
	require.True(t, ok, "every group of the stopped server has a new leader")
	others := 0
	for _, g := range led {
		if c.Leader(g).ID != first {
			others++
		}
	}
	require.Empty(t, rivals, "of %d groups, those where another than server %d stood as candidate", len(led), first)
	require.Zero(t, others, "of %d groups, led by another than server %d", len(led), first)
}
