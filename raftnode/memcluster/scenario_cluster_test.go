package memcluster

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
)

// add-nodes N [groups=G] [seed=S] [segment-size=B] [drop=P] [delay=P]
// [disk-delay=P]: a cluster of nodes 1..N, all voters of groups 1..G.
// Messages wait a step and disks lag by default, as in the Go tests.
func (s *scenario) addNodes(t *testing.T, d *datadriven.TestData) string {
	if s.c != nil {
		d.Fatalf(t, "add-nodes twice")
	}
	var count int
	if _, err := fmt.Sscan(positional(t, d, 0), &count); err != nil {
		d.Fatalf(t, "add-nodes N: %v", err)
	}
	cfg := Config{
		Seed:        uint64(intArg(t, d, "seed", 1)),
		SegmentSize: int64(intArg(t, d, "segment-size", 0)),
		DropRate:    floatArg(t, d, "drop", 0),
		Delay:       floatArg(t, d, "delay", 0.2),
		DiskDelay:   floatArg(t, d, "disk-delay", 0.3),
	}
	for i := 1; i <= count; i++ {
		cfg.Nodes = append(cfg.Nodes, uint64(i))
	}
	for g := 1; g <= intArg(t, d, "groups", 1); g++ {
		cfg.Groups = append(cfg.Groups, uint64(g))
	}
	c, err := New(cfg)
	require.NoError(t, err)
	s.c = c
	return c.Describe()
}

func (s *scenario) status(t *testing.T, d *datadriven.TestData) string {
	return s.c.Describe()
}

// stabilize [max-steps=N]: run until every group has a leader whose
// reachable members applied everything it has (or N steps, 20000 by
// default), then print the state. It first runs two election timeouts,
// because what a command started may not show yet: a leadership transfer,
// say, leaves the cluster looking settled until the target campaigns.
func (s *scenario) stabilize(t *testing.T, d *datadriven.TestData) string {
	electionTick := cmp.Or(s.c.cfg.Core.ElectionTick, 10) // raftnode's default
	require.NoError(t, s.c.Run(2*electionTick*s.c.cfg.TickEvery))
	ok, err := s.c.RunUntil(intArg(t, d, "max-steps", 20000), s.settled)
	require.NoError(t, err)
	if !ok {
		return "not settled: " + s.unsettled() + "\n" + s.c.Describe()
	}
	return s.c.Describe()
}

func (s *scenario) settled() bool { return s.unsettled() == "" }

// unsettled says why the cluster has not settled ("" when it has).
func (s *scenario) unsettled() string {
	for _, g := range s.c.cfg.Groups {
		if why := s.groupUnsettled(g); why != "" {
			return why
		}
	}
	return ""
}

func (s *scenario) groupUnsettled(g uint64) string {
	l := s.c.Leader(g)
	if l == nil {
		return fmt.Sprintf("no leader of g%d", g)
	}
	ls, _ := l.Raft.Status(g)
	last, err := l.Logs[g].LastIndex()
	if err != nil || last != ls.Commit || ls.Applied != ls.Commit || len(l.jobs) > 0 {
		return fmt.Sprintf("g%d leader n%d has uncommitted or unapplied entries", g, l.ID)
	}
	for _, n := range s.c.nodes {
		member := slices.Contains(ls.Voters, n.ID) || slices.Contains(ls.Learners, n.ID)
		if n == l || n.Down || !member || s.c.cut[[2]uint64{l.ID, n.ID}] {
			continue
		}
		st, _ := n.Raft.Status(g)
		// A (pre)candidate is not settled either: its campaign has an outcome to come.
		if st.Role != "StateFollower" || st.Term != ls.Term || st.Commit != ls.Commit || st.Applied != ls.Commit || len(n.jobs) > 0 {
			return fmt.Sprintf("g%d n%d is behind leader n%d", g, n.ID, l.ID)
		}
	}
	return ""
}

// run N: N steps, whatever happens.
func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	var steps int
	if _, err := fmt.Sscan(positional(t, d, 0), &steps); err != nil {
		d.Fatalf(t, "run N: %v", err)
	}
	require.NoError(t, s.c.Run(steps))
	return "ok"
}

// crash X: a power cut on node X (an id, leader or follower).
func (s *scenario) crash(t *testing.T, d *datadriven.TestData) string {
	n, name := s.nodeAt(t, d, 0)
	s.c.Crash(n.ID)
	return "crashed " + name
}

func (s *scenario) restart(t *testing.T, d *datadriven.TestData) string {
	n, name := s.nodeAt(t, d, 0)
	require.NoError(t, s.c.Restart(n.ID))
	return "restarted " + name
}

// isolate X: cut X off from every other node.
func (s *scenario) isolate(t *testing.T, d *datadriven.TestData) string {
	n, name := s.nodeAt(t, d, 0)
	s.c.Isolate(n.ID)
	return "isolated " + name
}

// partition A B: cut the links between A and B both ways.
func (s *scenario) partition(t *testing.T, d *datadriven.TestData) string {
	a, an := s.nodeAt(t, d, 0)
	b, bn := s.nodeAt(t, d, 1)
	s.c.Partition(a.ID, b.ID)
	return fmt.Sprintf("cut %s from %s", an, bn)
}

func (s *scenario) heal(t *testing.T, d *datadriven.TestData) string {
	s.c.Heal()
	return "healed every link"
}
