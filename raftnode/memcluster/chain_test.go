package memcluster

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
)

// TestFailedChainRefusesWhatFollows: the produces of one connection form a
// chain (raftnode.Chain). One refused for backpressure by its size was
// followed by a smaller one of the same connection that fit, and was
// written: a hole in the connection's writes, where a failed produce must
// fail every later one (the front end had submitted it before it learned
// of the failure). Now the chain's later proposals are refused; another
// connection's are taken, and an ended chain is forgotten.
func TestFailedChainRefusesWhatFollows(t *testing.T) {
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) { cfg.Core.MaxUncommittedBytes = 4 << 10 })
	l := waitLeader(t, c, 1)
	propose := func(size int, chain raftnode.Chain) raftnode.ProposalID {
		c.nextID++
		l.Raft.ProposeRecords(1, c.nextID, raftnode.UserData(batch(1, bytes.Repeat([]byte("x"), size))), 1, chain)
		return c.nextID
	}
	// One round: nothing commits in between.
	first := propose(100, 7)
	big := propose(8<<10, 7) // over the bound with first in flight: refused
	after := propose(100, 7) // fits: taken before chains
	other := propose(100, 8) // another connection
	l.Raft.EndChain(9)       // ending a chain that never failed is harmless
	l.Raft.Flush()
	ok, err := c.RunUntil(5000, func() bool {
		for _, id := range []raftnode.ProposalID{first, big, after, other} {
			if _, done := c.Results[id]; !done {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[first].Err)
	require.ErrorIs(t, c.Results[big].Err, raftnode.ErrBackpressure)
	require.ErrorIs(t, c.Results[after].Err, raftnode.ErrChainFailed, "a produce after a failed one of its connection is not written")
	require.NoError(t, c.Results[other].Err, "another connection's produce is taken")

	again := propose(100, 7)
	l.Raft.EndChain(7)
	fresh := propose(100, 7) // the number reused after its connection closed
	l.Raft.Flush()
	ok, err = c.RunUntil(5000, func() bool {
		_, a := c.Results[again]
		_, f := c.Results[fresh]
		return a && f
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, c.Results[again].Err, raftnode.ErrChainFailed, "still failed, later too")
	require.NoError(t, c.Results[fresh].Err, "an ended chain is forgotten")
}
