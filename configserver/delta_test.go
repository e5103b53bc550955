package configserver

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomGroups is a server's groups in a random state: some of 1..20,
// sorted, each with a random role, commit and followers.
func randomGroups(rng *rand.Rand) []GroupReport {
	var out []GroupReport
	for g := uint64(1); g <= 20; g++ {
		if rng.IntN(3) == 0 {
			continue
		}
		gr := GroupReport{Group: g, Role: []string{"StateLeader", "StateFollower"}[rng.IntN(2)], Term: uint64(rng.IntN(3)),
			Commit: uint64(rng.IntN(4)), Voters: []uint64{1, 2, 3}}
		if gr.Role == "StateLeader" {
			gr.Followers = []FollowerReport{{ID: 2, Match: uint64(rng.IntN(4)), Active: rng.IntN(2) == 0}}
		}
		out = append(out, gr)
	}
	return out
}

func byGroup(gs []GroupReport) map[uint64]GroupReport {
	m := map[uint64]GroupReport{}
	for _, g := range gs {
		m[g.Group] = g
	}
	return m
}

// TestDeltaReportsMergeToTheFullReport: whatever the groups do between two
// reports, the delta merged into the report it is based on is the later
// report in full; an unchanged server sends an empty delta.
func TestDeltaReportsMergeToTheFullReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	held := Report{Seq: 1, Groups: randomGroups(rng)}
	for seq := uint64(2); seq < 500; seq++ {
		cur := randomGroups(rng)
		changed, gone := DiffReport(byGroup(held.Groups), cur)
		delta := Report{Seq: seq, Base: held.Seq, Groups: changed, Gone: gone}
		full, ok := mergeReport(&held, delta)
		require.True(t, ok)
		if len(cur) == 0 {
			require.Empty(t, full.Groups)
		} else {
			require.Equal(t, cur, full.Groups, "report %d", seq)
		}
		require.Zero(t, full.Base)
		held = full
	}
	changed, gone := DiffReport(byGroup(held.Groups), slices.Clone(held.Groups))
	require.Empty(t, changed)
	require.Empty(t, gone)
}

// TestDeltaNeedsItsBase: a delta of a report the config server does not
// hold cannot be merged; a full report always can.
func TestDeltaNeedsItsBase(t *testing.T) {
	held := Report{Seq: 7, Groups: []GroupReport{{Group: 1}}}
	_, ok := mergeReport(nil, Report{Seq: 8, Base: 7})
	require.False(t, ok, "no report held")
	_, ok = mergeReport(&held, Report{Seq: 9, Base: 8})
	require.False(t, ok, "another base")
	full, ok := mergeReport(nil, Report{Seq: 9, Groups: []GroupReport{{Group: 2}}})
	require.True(t, ok)
	require.Equal(t, []GroupReport{{Group: 2}}, full.Groups)
}

// FuzzMergeReport: any delta a server can send (it is authenticated, but
// may be buggy) merges without a panic into sorted groups, each once.
func FuzzMergeReport(f *testing.F) {
	f.Add([]byte(`{"seq":2,"base":1,"groups":[{"group":3}],"gone":[1,1,9]}`))
	f.Add([]byte(`{"seq":2,"base":1,"groups":[{"group":2},{"group":2},{"group":1}]}`))
	f.Add([]byte(`{"seq":2,"base":1,"groups":[{"group":0},{"group":2,"role":"x"},{"group":5}],"gone":[2,4]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Report
		if json.Unmarshal(data, &r) != nil {
			return
		}
		held := Report{Seq: r.Base, Groups: []GroupReport{{Group: 1}, {Group: 2}}}
		full, ok := mergeReport(&held, r)
		if !ok {
			return
		}
		if r.Base != 0 { // merged: sorted, each group once, as a map merges
			for i := 1; i < len(full.Groups); i++ {
				require.Less(t, full.Groups[i-1].Group, full.Groups[i].Group)
			}
			want := byGroup(held.Groups)
			for _, g := range r.Groups {
				want[g.Group] = g
			}
			for _, g := range r.Gone {
				delete(want, g)
			}
			require.Equal(t, want, byGroup(full.Groups))
		}
	})
}

// TestDeltaReportsThroughConfigServers: a server's delta is merged into its
// last report (the config servers' view is the full report: a group it
// only ever mentioned in the first report is still its); the leaders are
// left out of the answer while the server holds them; a new config server
// leader, which holds no report, asks for a full one.
func TestDeltaReportsThroughConfigServers(t *testing.T) {
	tc := startConfigServers(t)
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc.leader()
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	st, err := cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.NoError(t, err)
	lead := GroupReport{Group: st.Group, Role: roleLeader, Leader: 1, Term: 2, Commit: 5, Voters: st.Replicas}
	other := GroupReport{Group: OffsetsGroup, Role: "StateFollower", Leader: 2, Term: 1, Voters: []uint64{1, 2, 3}}

	r := report(1, "a", other, lead)
	r.Seq = 1
	a, err := cl.Report(ctx, r)
	require.NoError(t, err)
	require.False(t, a.NeedFull)
	require.Equal(t, uint64(1), a.Leaders["orders"])
	require.NotZero(t, a.LeadersGen)

	// Nothing changed: an empty delta, and the leaders held are not resent.
	d := report(1, "a")
	d.Seq, d.Base, d.LeadersGen, d.Version = 2, 1, a.LeadersGen, a.Version
	a2, err := cl.Report(ctx, d)
	require.NoError(t, err)
	require.False(t, a2.NeedFull)
	require.Nil(t, a2.Leaders, "the server holds these leaders")
	require.Equal(t, a.LeadersGen, a2.LeadersGen)
	cs, err := cl.Cluster(ctx)
	require.NoError(t, err)
	for _, s := range cs.Servers {
		if s.ID == 1 {
			require.Equal(t, 2, s.Groups, "the empty delta kept both groups")
			require.Equal(t, 1, s.Leaders)
		}
	}

	// A delta of a report never answered here: a full report is asked for.
	d.Seq, d.Base = 3, 99
	a3, err := cl.Report(ctx, d)
	require.NoError(t, err)
	require.True(t, a3.NeedFull)

	// Another config server leads: it holds no report, and asks for one.
	old := tc.leader()
	require.NoError(t, tc.svcs[old].Close())
	tc.svcs[old] = nil
	tc.leader()
	d.Seq, d.Base = 4, 2
	require.Eventually(t, func() bool {
		a, err := cl.Report(ctx, d)
		return err == nil && a.NeedFull
	}, 10*time.Second, 50*time.Millisecond, "a new leader asks for a full report")
}
