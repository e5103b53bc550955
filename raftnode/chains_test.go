package raftnode

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A chain ended while one of its proposals was in flight is forgotten
// for good: that proposal failing later does not bring it back (it would
// stay, for a connection that is gone).
func TestEndedChainStaysForgotten(t *testing.T) {
	var cs chains
	require.True(t, cs.admit(1, 7))
	require.True(t, cs.admit(2, 8))
	cs.end(7)
	cs.settle(Complete{ID: 1, Err: errors.New("overwritten")})
	require.Empty(t, cs.failed)
	require.Equal(t, map[ProposalID]Chain{2: 8}, cs.of)
	require.True(t, cs.admit(3, 7), "the number reused by a new connection")
}
