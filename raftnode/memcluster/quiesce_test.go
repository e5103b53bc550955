package memcluster

import (
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// idleTraffic runs a cluster of 20 groups until it is idle and counts the
// messages it then sends over 100 ticks: per group (LivenessGroup for the
// liveness heartbeats).
func idleTraffic(t *testing.T, noQuiesce bool) map[uint64]int {
	cryptotest.SetGlobalRandom(t, 1)
	cfg := Config{Seed: 1, Nodes: []uint64{1, 2, 3}, Core: raftnode.Config{NoQuiesce: noQuiesce}}
	for g := uint64(1); g <= 20; g++ {
		cfg.Groups = append(cfg.Groups, g)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	defer c.Close()
	s := &scenario{c: c}
	ok, err := c.RunUntil(20000, s.settled)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Run(60)) // 20 ticks: idle groups quiesce
	for _, g := range cfg.Groups {
		for _, n := range c.Nodes() {
			require.Equal(t, !noQuiesce, n.Raft.Quiesced(g), "n%d g%d", n.ID, g)
		}
	}
	sent := map[uint64]int{}
	for range 100 * c.cfg.TickEvery {
		require.NoError(t, c.Step())
		for _, e := range c.wire {
			sent[e.group]++
		}
	}
	return sent
}

// TestIdleGroupsSendOnlyLiveness: once idle, groups send nothing; each
// server sends one liveness heartbeat per peer and tick, whatever the
// number of groups. Without quiescence every group heartbeats.
func TestIdleGroupsSendOnlyLiveness(t *testing.T) {
	sent := idleTraffic(t, false)
	require.Len(t, sent, 1, "only liveness heartbeats: %v", sent)
	require.InDelta(t, 100*3*2, sent[raftnode.LivenessGroup], 6)

	sent = idleTraffic(t, true)
	require.Zero(t, sent[raftnode.LivenessGroup])
	require.Len(t, sent, 20)
	for g, n := range sent {
		require.GreaterOrEqual(t, n, 100*2*2, "g%d: heartbeats and answers", g)
	}
}

// TestLivenessMessagesAreChecked: what arrives for the liveness group from
// the network is a heartbeat from a known peer or nothing; other messages
// are dropped and wake no group.
func TestLivenessMessagesAreChecked(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c, err := New(Config{Seed: 2, Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	require.NoError(t, err)
	defer c.Close()
	s := &scenario{c: c}
	ok, err := c.RunUntil(20000, s.settled)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Run(60))
	n := c.Node(1)
	require.True(t, n.Raft.Quiesced(1))
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(99)), Index: new(uint64(5))},
		{Type: raftpb.MsgVote.Enum(), From: new(uint64(3)), To: new(uint64(1)), Term: new(uint64(99))},
		{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1 << 40)), To: new(uint64(1))},
		{},
	} {
		n.Raft.Step(raftnode.LivenessGroup, m)
		n.Raft.Flush()
		require.True(t, n.Raft.Quiesced(1), "%v", m)
	}
	_, hosted := n.Raft.Status(raftnode.LivenessGroup)
	require.False(t, hosted)
}

// TestUnreachablePeerWakesItsGroups: when the transport reports a peer
// unreachable for the liveness heartbeat, the quiesced groups it leads wake
// at once; a group led here sleeps on without it while the other voters
// are a quorum, and wakes when they are not; the others stay quiet.
func TestUnreachablePeerWakesItsGroups(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c, err := New(Config{Seed: 3, Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	require.NoError(t, err)
	defer c.Close()
	s := &scenario{c: c}
	ok, err := c.RunUntil(20000, s.settled)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Run(60))
	l := c.Leader(1)
	var f *Node
	for _, n := range c.Nodes() {
		require.True(t, n.Raft.Quiesced(1))
		if n != l {
			f = n
		}
	}
	other := c.Nodes()[0]
	for _, n := range c.Nodes() {
		if n != l && n != f {
			other = n
		}
	}
	// A follower losing a fellow follower: nothing depends on it.
	f.Raft.ReportUnreachable(raftnode.LivenessGroup, other.ID)
	f.Raft.Flush()
	require.True(t, f.Raft.Quiesced(1))
	// A follower losing its leader.
	f.Raft.ReportUnreachable(raftnode.LivenessGroup, l.ID)
	f.Raft.Flush()
	require.False(t, f.Raft.Quiesced(1))
	// The leader losing one follower of two sleeps on without it, and
	// reports it inactive; losing the second, it wakes.
	l.Raft.ReportUnreachable(raftnode.LivenessGroup, other.ID)
	l.Raft.Flush()
	require.True(t, l.Raft.Quiesced(1))
	st, ok := l.Raft.Status(1)
	require.True(t, ok)
	require.False(t, st.Progress[other.ID].RecentActive)
	require.True(t, st.Progress[f.ID].RecentActive)
	l.Raft.ReportUnreachable(raftnode.LivenessGroup, f.ID)
	l.Raft.Flush()
	require.False(t, l.Raft.Quiesced(1))
}
