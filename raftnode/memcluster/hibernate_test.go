package memcluster

import (
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// hibernatingCluster is quiescedCluster of groups 1..groups, seeded,
// with core's configuration.
func hibernatingCluster(t *testing.T, seed uint64, groups int, core raftnode.Config) *Cluster {
	cryptotest.SetGlobalRandom(t, 1)
	return quiescedCluster(t, groups, func(cfg *Config) { cfg.Seed, cfg.Core = seed, core })
}

// TestQuiescedFollowersHibernate: once a group quiesces its followers drop
// their RawNodes (the leader keeps its own); a proposal wakes its group's
// followers, which take and apply it, and sleep again once idle; the
// groups around it sleep on throughout.
func TestQuiescedFollowersHibernate(t *testing.T) {
	c := hibernatingCluster(t, 5, 4, raftnode.Config{})
	s := &scenario{c: c}
	for g := uint64(1); g <= 4; g++ {
		l := c.Leader(g)
		for _, n := range c.Nodes() {
			require.True(t, n.Raft.Quiesced(g))
			require.Equal(t, n != l, n.Raft.Hibernating(g), "n%d g%d (leader n%d)", n.ID, g, l.ID)
			st, ok := n.Raft.Status(g)
			require.True(t, ok)
			require.Equal(t, l.ID, st.Leader, "a hibernating follower's status names its leader")
		}
	}

	l := c.Leader(1)
	id := c.Propose(l, 1, []byte("x"))
	ok, err := c.RunUntil(2000, func() bool { _, done := c.Results[id]; return done && s.settled() })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[id].Err)
	for _, n := range c.Nodes() {
		require.False(t, n.Raft.Hibernating(1), "n%d woke with the proposal", n.ID)
		require.Equal(t, c.Results[id].Index, statusOf(t, n, 1).Applied, "n%d applied it", n.ID)
		for g := uint64(2); g <= 4; g++ {
			require.Equal(t, n != c.Leader(g), n.Raft.Hibernating(g), "n%d g%d slept on", n.ID, g)
		}
	}
	require.NoError(t, c.Run(60))
	for _, n := range c.Nodes() {
		require.Equal(t, n != l, n.Raft.Hibernating(1), "n%d asleep again", n.ID)
	}
}

// TestHibernatingFollowerKeepsItsLease: a hibernating follower whose
// leader is alive ignores another replica's pre-vote, as raft does in the
// leader's lease; rebuilt without being told its leader, it would grant
// it (a replica coming back would depose a live leader).
func TestHibernatingFollowerKeepsItsLease(t *testing.T) {
	c := hibernatingCluster(t, 6, 1, raftnode.Config{})
	l := c.Leader(1)
	var fs []*Node
	for _, n := range c.Nodes() {
		if n != l {
			fs = append(fs, n)
		}
	}
	f, other := fs[0], fs[1]
	require.True(t, f.Raft.Hibernating(1))
	st := statusOf(t, f, 1)
	c.wire = nil
	f.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgPreVote.Enum(), From: new(other.ID), To: new(f.ID),
		Term: new(st.Term + 1), Index: new(st.Commit + 10), LogTerm: new(st.Term)})
	f.Raft.Flush()
	for range 3 { // a pre-vote's answer goes out once the appends before it are durable
		require.NoError(t, f.diskStep())
	}
	for _, e := range c.wire {
		if e.from == f.ID && e.msg.GetType() == raftpb.MsgPreVoteResp {
			require.True(t, e.msg.GetReject(), "a pre-vote granted in the leader's lease")
		}
	}
	require.Equal(t, l.ID, statusOf(t, f, 1).Leader)
}

// TestHibernationOffKeepsRawNodes: Config.NoHibernate keeps every RawNode.
func TestHibernationOffKeepsRawNodes(t *testing.T) {
	c := hibernatingCluster(t, 7, 2, raftnode.Config{NoHibernate: true})
	for g := uint64(1); g <= 2; g++ {
		for _, n := range c.Nodes() {
			require.True(t, n.Raft.Quiesced(g))
			require.False(t, n.Raft.Hibernating(g))
		}
	}
}

func statusOf(t *testing.T, n *Node, group uint64) raftnode.GroupStatus {
	st, ok := n.Raft.Status(group)
	require.True(t, ok)
	return st
}
