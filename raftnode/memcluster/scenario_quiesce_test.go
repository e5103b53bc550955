package memcluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
)

// quiesced [group=G]: which replicas of the group are quiesced.
func (s *scenario) quiesced(t *testing.T, d *datadriven.TestData) string {
	g := s.groupArg(t, d)
	var parts []string
	for _, n := range s.c.nodes {
		state := "awake"
		switch {
		case n.Down:
			state = "down"
		case n.Raft.Quiesced(g):
			state = "quiet"
		}
		parts = append(parts, fmt.Sprintf("n%d %s", n.ID, state))
	}
	return fmt.Sprintf("g%d: %s", g, strings.Join(parts, ", "))
}

// fence X [steps=N]: a read fence on node X (an id, leader or follower);
// runs until it ends or N steps (default 300) pass, and says how it ended.
func (s *scenario) fence(t *testing.T, d *datadriven.TestData) string {
	g := s.groupArg(t, d)
	n, name := s.nodeAt(t, d, 0)
	f := raftnode.NewFence()
	n.Raft.Fence(g, f)
	n.Raft.Flush()
	steps := intArg(t, d, "steps", 300)
	var took int
	ok, err := s.c.RunUntil(steps, func() bool {
		took++
		select {
		case <-f.Done():
			return true
		default:
			return false
		}
	})
	require.NoError(t, err)
	switch {
	case !ok:
		return fmt.Sprintf("fence on %s: not passed after %d steps", name, steps)
	case f.Err() != nil:
		return fmt.Sprintf("fence on %s: failed: %v", name, f.Err())
	}
	return fmt.Sprintf("fence on %s: passed", name)
}
