package configserver

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeadersDerivedAgainOnlyOnNewLeadership: a report that moves only
// offsets keeps the leaders derived from all reports and the report's group
// index; one that tells of another leadership, or lists other groups, has
// them derived again. Whatever the reports, the leaders are those derived
// from scratch and the index finds every group.
func TestLeadersDerivedAgainOnlyOnNewLeadership(t *testing.T) {
	s := &Service{soft: newSoftState()}
	now := time.Unix(0, 0)
	report := func(id uint64, groups []GroupReport) {
		s.soft.setReport(id, now, Report{Server: Server{ID: id}, Groups: groups})
	}
	groups := []GroupReport{
		{Group: 1, Role: roleLeader, Leader: 1, Term: 2, HighWatermark: 10},
		{Group: 2, Role: "StateFollower", Leader: 2, Term: 3, HighWatermark: 5},
	}
	report(1, groups)
	leaders := s.leadersLocked()
	require.Equal(t, map[uint64]uint64{1: 1}, leaders)

	moved := []GroupReport{groups[0], groups[1]}
	moved[0].HighWatermark, moved[1].HighWatermark = 20, 9
	report(1, moved)
	require.NotNil(t, s.soft.leaders, "offsets moved: the leaders are kept")
	require.Equal(t, 1, s.soft.reports[1].groups[2])

	moved = slices.Clone(moved) // the held report keeps its own
	moved[1].Role = roleLeader
	report(1, moved)
	require.Nil(t, s.soft.leaders, "a new leader: derived again")
	require.Equal(t, map[uint64]uint64{1: 1, 2: 2}, s.leadersLocked())

	// Random reports from three servers against a derivation from scratch.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		id := uint64(1 + rng.IntN(3))
		gs := randomGroups(rng)
		if prev := s.soft.reports[id].report.Groups; len(prev) > 0 && rng.IntN(2) == 0 {
			gs = slices.Clone(prev) // the same groups, offsets moved
			for i := range gs {
				gs[i].HighWatermark += int64(rng.IntN(3))
			}
		}
		for i := range gs {
			gs[i].Leader = id
			gs[i].Term = gs[i].Term%10*10 + id // Raft has one leader per term
		}
		report(id, gs)
		require.Equal(t, derivedLeaders(s.soft), s.leadersLocked())
		for i, g := range gs {
			require.Equal(t, i, s.soft.reports[id].groups[g.Group])
		}
		require.Len(t, s.soft.reports[id].groups, len(gs))
	}
}

// derivedLeaders derives each group's leader from the reports, as
// leadersLocked does, from scratch.
func derivedLeaders(soft *softState) map[uint64]uint64 {
	best := map[uint64]GroupReport{}
	for _, h := range soft.reports {
		for _, g := range h.report.Groups {
			if b, ok := best[g.Group]; g.Role == roleLeader && (!ok || g.Term > b.Term) {
				best[g.Group] = g
			}
		}
	}
	out := map[uint64]uint64{}
	for g, r := range best {
		out[g] = r.Leader
	}
	return out
}

// BenchmarkReportOfHotServer: the leader's bookkeeping of one report from a
// server hosting 10,000 groups (a third of which it leads) beside two
// others, when its hot streams moved their offsets and nothing else
// changed: the report kept and the leaders asked for, as every answer does.
func BenchmarkReportOfHotServer(b *testing.B) {
	const groups = 10000
	s := &Service{soft: newSoftState()}
	now := time.Unix(0, 0)
	reports := map[uint64][]GroupReport{}
	for id := uint64(1); id <= 3; id++ {
		gs := make([]GroupReport, groups)
		for g := range gs {
			leader := uint64(g%3 + 1)
			gs[g] = GroupReport{Group: uint64(g + 1), Role: "StateFollower", Leader: leader, Term: 2, Voters: []uint64{1, 2, 3}}
			if leader == id {
				gs[g].Role = roleLeader
			}
		}
		reports[id] = gs
		s.soft.setReport(id, now, Report{Server: Server{ID: id}, Groups: gs})
	}
	s.leadersLocked()
	b.ReportAllocs()
	for i := range b.N {
		gs := slices.Clone(reports[1])
		for g := range 10 {
			gs[g*3].HighWatermark = int64(i)
		}
		s.soft.setReport(1, now, Report{Server: Server{ID: 1}, Groups: gs})
		if len(s.leadersLocked()) != groups {
			b.Fatal("leaders lost")
		}
	}
}
