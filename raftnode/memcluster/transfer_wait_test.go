package memcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProposalsWaitForATransfer: raft drops proposals while its leader
// transfers leadership, and takes them again once a transfer it could not
// finish is abandoned, an election timeout later, in the same term. A
// proposal dropped then, with a later one of the same connection taken
// after, left a hole in the connection's writes (simulator seed 6290 with
// the control plane: the balancer moved a leader). Proposals made during a
// transfer now wait for its end: taken in order if the leader stays, all
// refused if it goes.
func TestProposalsWaitForATransfer(t *testing.T) {
	c, l := quiescedLed(t, 1, 1)
	to := otherNode(c, l.ID)
	c.Partition(l.ID, to) // the transferee never catches up: the transfer is abandoned
	l.Raft.TransferLeader(1, to)
	l.Raft.Flush()
	require.NoError(t, c.Run(3))
	first := c.Propose(l, 1, []byte("during the transfer"))
	require.NoError(t, c.Run(3))
	ok, err := c.RunUntil(10*electionTick*c.cfg.TickEvery, func() bool { _, done := c.Results[first]; return done })
	require.NoError(t, err)
	require.True(t, ok, "the proposal completed")
	require.Equal(t, l.ID, c.Leader(1).ID, "the leader stayed: the transfer was abandoned")
	require.NoError(t, c.Results[first].Err, "a proposal made during the transfer waited for its end and was taken")
	later := c.Propose(l, 1, []byte("after it"))
	ok, err = c.RunUntil(10*electionTick*c.cfg.TickEvery, func() bool { _, done := c.Results[later]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[later].Err)
	require.Greater(t, c.Results[later].Index, c.Results[first].Index, "in order")
}

// otherNode returns the first node in id order that is not not.
func otherNode(c *Cluster, not uint64) uint64 {
	for _, n := range c.Nodes() {
		if n.ID != not {
			return n.ID
		}
	}
	return 0
}
