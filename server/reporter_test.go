package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/configserver"
)

// TestReporterSendsDeltasOfTheAnsweredReport: the first report is full;
// once answered, the next carry only what changed; a failed report or a
// NeedFull answer makes the next full again, and so does every
// FullReportEvery-th.
func TestReporterSendsDeltasOfTheAnsweredReport(t *testing.T) {
	g1 := configserver.GroupReport{Group: 1, Role: "StateLeader", Commit: 3}
	g2 := configserver.GroupReport{Group: 2, Role: "StateFollower", Commit: 7}
	all := configserver.Report{Groups: []configserver.GroupReport{g1, g2}}
	var p reporter

	r, cur := p.next(all)
	require.Equal(t, uint64(1), r.Seq)
	require.Zero(t, r.Base, "the first report is full")
	require.Len(t, r.Groups, 2)
	p.answered(r, cur, configserver.Assignment{LeadersGen: 5, Leaders: map[string]uint64{"a": 1}})

	g1b := g1
	g1b.Commit = 4
	r, cur = p.next(configserver.Report{Groups: []configserver.GroupReport{g1b}})
	require.Equal(t, uint64(1), r.Base)
	require.Equal(t, []configserver.GroupReport{g1b}, r.Groups, "only the group that changed")
	require.Equal(t, []uint64{2}, r.Gone)
	require.Equal(t, uint64(5), r.LeadersGen, "the leaders held")
	p.answered(r, cur, configserver.Assignment{LeadersGen: 5})
	require.Equal(t, map[uint64]configserver.GroupReport{1: g1b}, p.groups, "the answered delta applied to its base")
	r, _ = p.next(configserver.Report{Groups: cur})
	require.Equal(t, uint64(2), r.Base)
	require.Empty(t, r.Groups)
	require.Empty(t, r.Gone)

	p.lost() // the report failed: unknown whether it was heard
	r, _ = p.next(configserver.Report{Groups: cur})
	require.Zero(t, r.Base)
	p.answered(r, cur, configserver.Assignment{NeedFull: true})
	r, cur = p.next(configserver.Report{Groups: cur})
	require.Zero(t, r.Base, "asked for a full report")
	p.answered(r, cur, configserver.Assignment{LeadersGen: 5})
	require.Equal(t, uint64(5), p.leadersGen, "leaders left out: still held")

	fulls := 0
	for range 2 * configserver.FullReportEvery {
		r, cur = p.next(configserver.Report{Groups: cur})
		if r.Base == 0 {
			fulls++
		} else {
			require.Empty(t, r.Groups)
		}
		p.answered(r, cur, configserver.Assignment{LeadersGen: 5})
	}
	require.Equal(t, 2, fulls, "a full report every %d", configserver.FullReportEvery)
}
