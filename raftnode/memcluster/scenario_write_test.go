package memcluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/clustertest"
)

// value returns the next unique record value, so check can tell writes apart.
func (s *scenario) value() string {
	s.nextValue++
	return fmt.Sprintf("v%d", s.nextValue)
}

func record(value string) []byte {
	return raftnode.UserData(clustertest.Batch([]byte(value)))
}

// waitLeader runs until the group has a leader (nil after 5000 steps).
func (s *scenario) waitLeader(t *testing.T, g uint64) *Node {
	_, err := s.c.RunUntil(5000, func() bool { return s.c.Leader(g) != nil })
	require.NoError(t, err)
	return s.c.Leader(g)
}

// waitDone runs until every proposal completed; false after max steps.
func (s *scenario) waitDone(t *testing.T, ids []raftnode.ProposalID) bool {
	ok, err := s.c.RunUntil(20000, func() bool {
		for _, id := range ids {
			if _, done := s.c.Results[id]; !done {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	return ok
}

// produce n=N [group=G]: N one-record writes on the leader, as a client
// would send them: a write the leader refuses at once (it stepped down) is
// sent again. Waits for every outcome.
func (s *scenario) produce(t *testing.T, d *datadriven.TestData) string {
	g := s.groupArg(t, d)
	want := intArg(t, d, "n", 1)
	var ids []raftnode.ProposalID
	values := map[raftnode.ProposalID]string{}
	// A leader that keeps refusing (it is stepping down again and again)
	// must not hang the script: give up after a few times want attempts.
	for attempts := 0; len(ids) < want && attempts < 4*want; attempts++ {
		l := s.waitLeader(t, g)
		if l == nil {
			break
		}
		v := s.value()
		id := s.c.Propose(l, g, record(v))
		require.NoError(t, s.c.Run(1))
		if r, done := s.c.Results[id]; done && r.Err != nil {
			continue // refused at once: not the leader any more
		}
		ids = append(ids, id)
		values[id] = v
	}
	s.waitDone(t, ids)
	return s.summarize(g, want, ids, values)
}

// summarize reports a produce's outcomes and remembers what was acknowledged.
func (s *scenario) summarize(g uint64, want int, ids []raftnode.ProposalID, values map[raftnode.ProposalID]string) string {
	var b strings.Builder
	var first, next int64 = -1, -1
	acked, pending := 0, 0
	for _, id := range ids {
		r, done := s.c.Results[id]
		switch {
		case !done:
			pending++
		case r.Err != nil:
			fmt.Fprintf(&b, "%s failed: %v\n", values[id], r.Err)
		default:
			acked++
			s.acked = append(s.acked, ackedWrite{group: g, res: r, value: values[id]})
			if first < 0 {
				first = r.BaseOffset
			}
			next = r.NextOffset
		}
	}
	fmt.Fprintf(&b, "acknowledged %d of %d writes", acked, want)
	if acked > 0 {
		fmt.Fprintf(&b, " at offsets [%d,%d)", first, next)
	}
	if pending > 0 {
		fmt.Fprintf(&b, "; %d without an outcome", pending)
	}
	if len(ids) < want {
		fmt.Fprintf(&b, "; %d never proposed: no leader took them", want-len(ids))
	}
	return b.String()
}

// propose X [group=G]: one write on node X, left open: results tells what
// became of it.
func (s *scenario) propose(t *testing.T, d *datadriven.TestData) string {
	n, name := s.nodeAt(t, d, 0)
	g := s.groupArg(t, d)
	v := s.value()
	id := s.c.Propose(n, g, record(v))
	s.proposals = append(s.proposals, proposal{id: id, node: n.ID, group: g, value: v})
	return fmt.Sprintf("proposed %s to g%d on %s", v, g, name)
}

// results: the outcome of every write propose made so far.
func (s *scenario) results(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	for i := range s.proposals {
		p := &s.proposals[i]
		fmt.Fprintf(&b, "%s on n%d: ", p.value, p.node)
		r, done := s.c.Results[p.id]
		switch {
		case !done:
			b.WriteString("no outcome yet\n")
		case r.Err != nil:
			fmt.Fprintf(&b, "failed: %v\n", r.Err)
		default:
			fmt.Fprintf(&b, "acknowledged at offset %d\n", r.BaseOffset)
			if !p.counted {
				p.counted = true
				s.acked = append(s.acked, ackedWrite{group: p.group, res: r, value: p.value})
			}
		}
	}
	return b.String()
}

// retain before=OFFSET [group=G]: the retention command, through raft.
func (s *scenario) retain(t *testing.T, d *datadriven.TestData) string {
	g := s.groupArg(t, d)
	before := int64(intArg(t, d, "before", 0))
	l := s.waitLeader(t, g)
	if l == nil {
		return "no leader"
	}
	id := s.c.Propose(l, g, raftnode.RetainData(before))
	if !s.waitDone(t, []raftnode.ProposalID{id}) {
		return "no outcome"
	}
	if err := s.c.Results[id].Err; err != nil {
		return fmt.Sprintf("retention before offset %d in g%d: %v", before, g, err)
	}
	return fmt.Sprintf("retention before offset %d in g%d: committed", before, g)
}
