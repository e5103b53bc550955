package configserver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPlanTransfers: a leader outside its preferred DC waits balance_after,
// then goes to the caught-up replica there; with none caught up, the stream
// is refused with why.
func TestPlanTransfers(t *testing.T) {
	servers := map[uint64]Server{1: {ID: 1, DC: "a"}, 2: {ID: 2, DC: "b"}, 3: {ID: 3, DC: "c"}}
	st := Stream{Name: "s", Group: 7, Replicas: []uint64{1, 2, 3}, PreferredDC: "a", State: StreamActive}
	rep := GroupReport{Group: 7, Role: roleLeader, Leader: 2, Commit: 10,
		Followers: []FollowerReport{{ID: 1, Match: 10, Active: true}, {ID: 3, Match: 10, Active: true}}}
	v := BalanceView{Servers: servers, Streams: []Stream{st}, Leaders: map[uint64]uint64{7: 2},
		Reports: map[uint64]GroupReport{7: rep}, Up: map[uint64]bool{1: true, 2: true, 3: true}}
	mem := BalanceMemory{Outside: map[string]time.Time{}, Last: map[string]time.Time{}}
	t0 := time.UnixMilli(1_000_000)
	after := 10 * time.Second

	plan, pending, refused := PlanTransfers(v, &mem, t0, after)
	require.Empty(t, plan)
	require.Len(t, pending, 1)
	require.Empty(t, refused)

	plan, _, _ = PlanTransfers(v, &mem, t0.Add(after), after)
	require.Equal(t, []Transfer{{Stream: st, From: 2, To: 1, Reason: `back to preferred dc "a"`}}, plan)

	v.Reports[7] = GroupReport{Group: 7, Role: roleLeader, Leader: 2, Commit: 10,
		Followers: []FollowerReport{{ID: 1, Match: 9, Active: true}, {ID: 3, Match: 10, Active: true}}}
	plan, _, refused = PlanTransfers(v, &mem, t0.Add(after), after)
	require.Empty(t, plan)
	require.Len(t, refused, 1)
	require.Contains(t, refused[0].Reason, "no replica in preferred dc")

	// Back in its DC: forgotten.
	v.Leaders[7] = 1
	plan, pending, refused = PlanTransfers(v, &mem, t0.Add(2*after), after)
	require.Empty(t, plan)
	require.Empty(t, pending)
	require.Empty(t, refused)
	require.Empty(t, mem.Outside)
}
