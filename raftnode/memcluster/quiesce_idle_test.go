package memcluster

import (
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
)

// quiescedCluster starts three nodes hosting groups 1..n (mods change the
// configuration first) and runs them until every group is led, settled
// and quiesced everywhere.
func quiescedCluster(tb testing.TB, n int, mods ...func(*Config)) *Cluster {
	cfg := Config{Seed: 1, Nodes: []uint64{1, 2, 3}}
	for g := uint64(1); g <= uint64(n); g++ {
		cfg.Groups = append(cfg.Groups, g)
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	c, err := New(cfg)
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	s := &scenario{c: c}
	ok, err := c.RunUntil(200000, s.settled)
	require.NoError(tb, err)
	require.True(tb, ok, s.unsettled())
	require.NoError(tb, c.Run(60))
	for _, g := range cfg.Groups {
		for _, nd := range c.Nodes() {
			require.True(tb, nd.Raft.Quiesced(g), "n%d g%d", nd.ID, g)
		}
	}
	return c
}

// quiescedLed is quiescedCluster of n groups, seeded, with group g's
// leader.
func quiescedLed(t *testing.T, n int, g uint64) (*Cluster, *Node) {
	cryptotest.SetGlobalRandom(t, 1)
	c := quiescedCluster(t, n)
	l := c.Leader(g)
	require.NotNil(t, l)
	return c, l
}

// TestQuiescedGroupStatus: a quiesced group's status, which the core keeps
// once asked while the group sleeps, is what it was when it quiesced; a
// sleeping leader still sees its replicas alive (their servers' liveness
// heartbeats); a proposal wakes the group and its status moves on.
func TestQuiescedGroupStatus(t *testing.T) {
	c, l := quiescedLed(t, 5, 3)
	before, ok := l.Raft.Status(3)
	require.True(t, ok)
	require.Len(t, before.InSync, 3, "every replica in sync: %+v", before)

	require.NoError(t, c.Run(100*c.cfg.TickEvery)) // asleep for 100 ticks
	asleep, ok := l.Raft.Status(3)
	require.True(t, ok)
	require.Equal(t, before, asleep)
	for id, p := range asleep.Progress {
		require.True(t, p.RecentActive, "replica %d of a sleeping group, its server alive", id)
	}

	c.Propose(l, 3, []byte("wake"))
	ok, err := c.RunUntil(1000, func() bool {
		st, _ := l.Raft.Status(3)
		return st.Commit > before.Commit && st.Applied == st.Commit
	})
	require.NoError(t, err)
	require.True(t, ok, "the proposal is committed and the status says so")
	require.False(t, l.Raft.Quiesced(3))
	for _, nd := range c.Nodes() {
		require.True(t, nd.Raft.Quiesced(4), "n%d: group 4 slept through it", nd.ID)
	}
}

// TestWokenFollowerElectsOnTime: a follower's election clock counts the
// ticks it slept through, so when its leader's server dies after a long
// sleep, the group elects a new leader within the election bound, as one
// that never slept.
func TestWokenFollowerElectsOnTime(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c := quiescedCluster(t, 3)
	require.NoError(t, c.Run(500*c.cfg.TickEvery)) // a long sleep
	old := c.Leader(2)
	require.NotNil(t, old)
	c.Crash(old.ID)
	ticks := 0
	ok, err := c.RunUntil(100*c.cfg.TickEvery, func() bool {
		l := c.Leader(2)
		if c.steps%c.cfg.TickEvery == 0 {
			ticks++
		}
		return l != nil && l.ID != old.ID
	})
	require.NoError(t, err)
	require.True(t, ok, "a new leader of group 2")
	// The liveness timeout (an election timeout) wakes the group; raft's
	// randomized election timeout (at most two) elects: about three.
	require.LessOrEqual(t, ticks, 4*electionTick, "ticks from the crash to a new leader")
}

// BenchmarkIdleTick is the cost of one tick of a three-node cluster whose
// groups are all quiesced, the liveness heartbeats delivered: it should not
// grow with the number of groups (before, every tick visited every group
// twice).
func BenchmarkIdleTick(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			c := quiescedCluster(b, n)
			for b.Loop() { // a tick of every node, and the liveness heartbeats delivered
				require.NoError(b, c.Run(c.cfg.TickEvery))
			}
			for _, nd := range c.Nodes() {
				require.True(b, nd.Raft.Quiesced(uint64(n)), "n%d: still quiesced", nd.ID)
			}
		})
	}
}

// electionTick is raftnode's default election timeout, in ticks.
const electionTick = 10

// TestLeaderSleepsWithoutADeadReplica: after a long sleep, a leader whose
// replica's server dies wakes the group (that server's liveness heartbeats
// stop), reports that replica neither active nor in sync, and — the live
// replicas being a quorum — sleeps again without it rather than
// heartbeating a dead server for as long as it stays down. When the server
// comes back, the first message from it wakes the group, which catches it
// up and sleeps again with every replica. Late reports of messages that
// did not reach the dead replica do not wake it. (The ticks a group slept through
// count: a leader that did not count them took the dead replica's last
// answer, from before the sleep, for a recent one.)
func TestLeaderSleepsWithoutADeadReplica(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c := quiescedCluster(t, 3)
	require.NoError(t, c.Run(500*c.cfg.TickEvery))
	l := c.Leader(1)
	require.NotNil(t, l)
	var dead uint64
	for _, nd := range c.Nodes() {
		if nd.ID != l.ID {
			dead = nd.ID
			break
		}
	}
	c.Crash(dead)
	require.NoError(t, c.Run(3*electionTick*c.cfg.TickEvery))
	st, ok := l.Raft.Status(1)
	require.True(t, ok)
	require.Equal(t, "StateLeader", st.Role)
	require.False(t, st.Progress[dead].RecentActive, "the dead replica is not active: %+v", st.Progress)
	require.NotContains(t, st.InSync, dead)
	for _, nd := range c.Nodes() {
		if nd.ID != dead {
			require.True(t, nd.Raft.Quiesced(1), "n%d: asleep without the dead replica", nd.ID)
		}
	}
	// The transport reports the heartbeats that did not reach the dead
	// replica, late: they do not wake the group (it would heartbeat the
	// dead replica again, whose failure would wake it again).
	l.Raft.ReportUnreachable(1, dead)
	require.True(t, l.Raft.Quiesced(1), "asleep through a report of its dead replica")

	c.Propose(l, 1, []byte("while it was down"))
	require.NoError(t, c.Restart(dead))
	ok, err := c.RunUntil(20*electionTick*c.cfg.TickEvery, func() bool {
		for _, nd := range c.Nodes() {
			if !nd.Raft.Quiesced(1) {
				return false
			}
		}
		back, _ := c.Node(dead).Raft.Status(1)
		lst, _ := l.Raft.Status(1)
		return back.Commit == lst.Commit && back.Leader == l.ID
	})
	require.NoError(t, err)
	require.True(t, ok, "the restarted replica caught up and every replica sleeps again")
}
