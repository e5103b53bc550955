package memcluster

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// campaign X [group=G]: X starts an election now.
func (s *scenario) campaign(t *testing.T, d *datadriven.TestData) string {
	n, name := s.nodeAt(t, d, 0)
	g := s.groupArg(t, d)
	n.Raft.Campaign(g)
	n.Raft.Flush()
	return fmt.Sprintf("%s campaigns in g%d", name, g)
}

// transfer-leader X [group=G]: the leader hands the group to X.
func (s *scenario) transferLeader(t *testing.T, d *datadriven.TestData) string {
	to, name := s.nodeAt(t, d, 0)
	g := s.groupArg(t, d)
	l := s.waitLeader(t, g)
	if l == nil {
		return "no leader"
	}
	l.Raft.TransferLeader(g, to.ID)
	l.Raft.Flush()
	return fmt.Sprintf("n%d hands g%d to %s", l.ID, g, name)
}

// add-node X: a new server with empty logs, a member of no group yet.
func (s *scenario) addNode(t *testing.T, d *datadriven.TestData) string {
	id, err := strconv.ParseUint(positional(t, d, 0), 10, 64)
	if err != nil {
		d.Fatalf(t, "add-node ID: %v", err)
	}
	_, err = s.c.AddNode(id)
	require.NoError(t, err)
	return fmt.Sprintf("started n%d with empty logs", id)
}

// add-learner X, promote X, remove X [group=G]: one membership change,
// proposed on the leader; waits for its outcome.
func (s *scenario) addLearner(t *testing.T, d *datadriven.TestData) string {
	return s.changeMembers(t, d, raftpb.ConfChangeAddLearnerNode, "add learner")
}

func (s *scenario) promote(t *testing.T, d *datadriven.TestData) string {
	return s.changeMembers(t, d, raftpb.ConfChangeAddNode, "promote")
}

func (s *scenario) remove(t *testing.T, d *datadriven.TestData) string {
	return s.changeMembers(t, d, raftpb.ConfChangeRemoveNode, "remove")
}

func (s *scenario) changeMembers(t *testing.T, d *datadriven.TestData, typ raftpb.ConfChangeType, verb string) string {
	n, name := s.nodeAt(t, d, 0)
	g := s.groupArg(t, d)
	l := s.waitLeader(t, g)
	if l == nil {
		return "no leader"
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(n.ID)}}}
	id := s.c.ProposeConfChange(l, g, cc)
	if !s.waitDone(t, []raftnode.ProposalID{id}) {
		return fmt.Sprintf("%s %s in g%d: no outcome", verb, name, g)
	}
	if err := s.c.Results[id].Err; err != nil {
		return fmt.Sprintf("%s %s in g%d: %v", verb, name, g, err)
	}
	return fmt.Sprintf("%s %s in g%d: committed", verb, name, g)
}
