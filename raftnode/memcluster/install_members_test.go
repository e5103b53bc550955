package memcluster

import (
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// TestInstallTellsTheContextsItJumpsOver: a replica that learns its
// group's membership from a snapshot install is also told the contexts of
// the membership changes among the entries it copied. A server learns
// from them which data dir each added node is; without them, a node
// removed and added back with a replaced disk stayed known by its old dir
// on a replica that installed across both changes, and the replacement's
// next step was refused for good (the simulator, seed 178 with a longer
// succession hold).
func TestInstallTellsTheContextsItJumpsOver(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 7)
	told := map[uint64][]string{} // node -> contexts its engine told of
	c := newCluster(t, 7, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) {
		cfg.OnMembership = func(node, _ uint64, _ *raftpb.ConfState, ctx []byte) {
			told[node] = append(told[node], string(ctx))
		}
	})
	produce(t, c, 1, 5)
	l := waitLeader(t, c, 1)
	_, err := c.AddNode(4)
	require.NoError(t, err)
	cc := &raftpb.ConfChangeV2{Context: []byte("node 4, dir 44"),
		Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(4))}}}
	waitResults(t, c, []raftnode.ProposalID{c.ProposeConfChange(l, 1, cc)})
	n4 := c.Node(4)
	ok, err := c.RunUntil(20000, func() bool { return n4.HighWatermark(1) == l.HighWatermark(1) })
	require.NoError(t, err)
	require.True(t, ok, "the learner caught up (a snapshot install first: its log was empty)")
	require.Contains(t, told[l.ID], "node 4, dir 44", "the leader applied the change")
	require.Contains(t, told[4], "node 4, dir 44", "the learner installed across the change")
}
