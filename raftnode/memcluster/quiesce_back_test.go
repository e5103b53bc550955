package memcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuiescedReplicaBackAfterAStall: a follower's server stalls (a paused
// process, a one-way partition): its peers hear nothing from it for more
// than an election timeout, so the quiesced groups led elsewhere sleep on
// without it, while it keeps hearing their leaders' liveness heartbeats
// and its own replicas stay asleep, sending nothing in the groups. Once
// it is heard again, the leaders count it back without waking the
// groups. Before, it stayed dead in them for as long as they slept:
// reported inactive, so the balancer never moved an idle stream's leader
// to it (simulator seed 850, a paused server in the preferred DC).
func TestQuiescedReplicaBackAfterAStall(t *testing.T) {
	c, l := quiescedLed(t, 2, 1)
	// f leads group 2: l's server, a follower there, keeps sending it
	// liveness heartbeats while it stalls.
	f := c.Leader(2).ID
	if f == l.ID {
		f = otherNode(c, l.ID)
		l.Raft.TransferLeader(2, f)
		l.Raft.Flush()
		ok, err := c.RunUntil(2000, func() bool { nl := c.Leader(2); return nl != nil && nl.ID == f })
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, c.Run(20*c.cfg.TickEvery))
		require.True(t, l.Raft.Quiesced(1) && l.Raft.Quiesced(2), "settled again")
	}
	for _, n := range c.Nodes() {
		if n.ID != f {
			c.Cut(f, n.ID)
		}
	}
	require.NoError(t, c.Run(3*electionTick*c.cfg.TickEvery))
	st, ok := l.Raft.Status(1)
	require.True(t, ok)
	require.False(t, st.Progress[f].RecentActive, "silent for three election timeouts: dead")
	require.True(t, l.Raft.Quiesced(1), "the group sleeps on without it")
	require.True(t, c.Node(f).Raft.Quiesced(1), "its replica still hears its leader: asleep")

	c.Heal()
	require.NoError(t, c.Run(2*electionTick*c.cfg.TickEvery))
	require.True(t, l.Raft.Quiesced(1), "counted back without waking")
	require.True(t, c.Node(f).Raft.Quiesced(1))
	st, ok = l.Raft.Status(1)
	require.True(t, ok)
	require.True(t, st.Progress[f].RecentActive, "heard again: active")
	require.Len(t, st.InSync, 3)

	// And the group still works with it.
	id := c.Propose(l, 1, []byte("after the stall"))
	ok, err := c.RunUntil(1000, func() bool { _, done := c.Results[id]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[id].Err)
}

// TestLeaderProbesADeadReplica: a quiesced group sleeping without a
// replica wakes now and then (probeDead) and heartbeats it: a replica
// silent in the group may be alive and stuck asleep in an older term,
// which nothing else reaches — two quiesced leaders of one group in two
// terms, for good, in simulator seeds 148 and 574 (regression seeds).
// Without the probe the group sleeps for as long as the replica is down.
func TestLeaderProbesADeadReplica(t *testing.T) {
	c, l := quiescedLed(t, 1, 1)
	f := otherNode(c, l.ID)
	c.Crash(f)
	ok, err := c.RunUntil(20*electionTick*c.cfg.TickEvery, func() bool {
		st, _ := l.Raft.Status(1)
		return l.Raft.Quiesced(1) && !st.Progress[f].RecentActive
	})
	require.NoError(t, err)
	require.True(t, ok, "asleep without the crashed replica")
	woke := 0
	for range (12 * electionTick) * c.cfg.TickEvery { // over ten election timeouts: a pass
		require.NoError(t, c.Step())
		if !l.Raft.Quiesced(1) {
			woke++
		}
	}
	require.NotZero(t, woke, "probed")
	require.Less(t, woke, 4*electionTick*c.cfg.TickEvery, "and back asleep")
	require.True(t, l.Raft.Quiesced(1))
}
