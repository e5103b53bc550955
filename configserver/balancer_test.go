package configserver

import (
	"fmt"
	"maps"
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

// TestEvenCountsMoveIdleStreamsFirst: to even the leader counts the
// balancer moves idle streams' leaders, not a busy one's, although the busy
// one comes first in the catalog (creating 10,000 streams moved the leaders
// of the first streams by name, the busy ones, 20 times each); a busy
// stream moves only when no idle one can.
func TestEvenCountsMoveIdleStreamsFirst(t *testing.T) {
	servers := map[uint64]Server{1: {ID: 1, DC: "a"}, 2: {ID: 2, DC: "a"}, 3: {ID: 3, DC: "a"}}
	view := func(commits ...uint64) BalanceView {
		v := BalanceView{Servers: servers, Leaders: map[uint64]uint64{}, Reports: map[uint64]GroupReport{},
			Up: map[uint64]bool{1: true, 2: true, 3: true}}
		for i, name := range []string{"hot", "idle1", "idle2"} {
			g := uint64(10 + i)
			v.Streams = append(v.Streams, Stream{Name: name, Group: g, Replicas: []uint64{1, 2, 3}, State: StreamActive})
			v.Leaders[g] = 1
			v.Reports[g] = GroupReport{Group: g, Role: roleLeader, Leader: 1, Commit: commits[i], HighWatermark: int64(commits[i]),
				Followers: []FollowerReport{{ID: 2, Match: commits[i], Active: true}, {ID: 3, Match: commits[i], Active: true}}}
		}
		return v
	}
	names := func(plan []Transfer) (out []string) {
		for _, t := range plan {
			out = append(out, t.Stream.Name)
		}
		return out
	}
	t0 := time.UnixMilli(1_000_000)
	after := time.Second
	recent := map[string]time.Time{"hot": t0, "idle1": t0, "idle2": t0}

	mem := BalanceMemory{Outside: map[string]time.Time{}, Last: maps.Clone(recent)}
	plan, _, _ := PlanTransfers(view(5, 5, 5), &mem, t0, after) // commits seen; each moved just now
	require.Empty(t, plan)
	mem.Last = map[string]time.Time{}
	plan, _, _ = PlanTransfers(view(9, 5, 5), &mem, t0.Add(after), after) // hot written since
	require.Equal(t, []string{"idle1", "idle2"}, names(plan), "three leaders on server 1: two idle ones move")
	// Quiet for BusyFor: idle again, but written more recently than the
	// others, which still move first (by the catalog's order, a stream written a
	// minute ago was moved in every round while thousands were created).
	plan, _, _ = PlanTransfers(view(9, 5, 5), &mem, t0.Add(2*after+BusyFor), after)
	require.Equal(t, []string{"idle1", "idle2"}, names(plan), "the least recently written move first")

	// Every stream written: the catalog's order.
	mem = BalanceMemory{Outside: map[string]time.Time{}, Last: maps.Clone(recent)}
	PlanTransfers(view(5, 5, 5), &mem, t0, after)
	mem.Last = map[string]time.Time{}
	plan, _, _ = PlanTransfers(view(9, 9, 9), &mem, t0.Add(after), after)
	require.Equal(t, []string{"hot", "idle1"}, names(plan), "busy streams move when no idle one can")

	// Quiet for BusyFor: idle again, the catalog's order.
	plan, _, _ = PlanTransfers(view(9, 9, 9), &mem, t0.Add(after+BusyFor), after)
	require.Equal(t, []string{"hot", "idle1"}, names(plan))
}

// Busy streams' leaders are spread too, not only the counts: three written
// streams all led by server 1 beside even counts of idle ones (3/3/3; the
// counts alone called for no transfer) end 1/1/1, the counts still even,
// and the next round plans nothing (no transfer undoes another).
func TestBusyStreamsLeadersSpread(t *testing.T) {
	servers := map[uint64]Server{1: {ID: 1, DC: "a"}, 2: {ID: 2, DC: "a"}, 3: {ID: 3, DC: "a"}}
	names := []string{"hot1", "hot2", "hot3", "idle1", "idle2", "idle3", "idle4", "idle5", "idle6"}
	leaders := map[string]uint64{"hot1": 1, "hot2": 1, "hot3": 1, "idle1": 2, "idle2": 2, "idle3": 2, "idle4": 3, "idle5": 3, "idle6": 3}
	view := func(hotCommit uint64) BalanceView {
		v := BalanceView{Servers: servers, Leaders: map[uint64]uint64{}, Reports: map[uint64]GroupReport{},
			Up: map[uint64]bool{1: true, 2: true, 3: true}}
		for i, name := range names {
			g, commit := uint64(10+i), uint64(5)
			if name[:3] == "hot" {
				commit = hotCommit
			}
			v.Streams = append(v.Streams, Stream{Name: name, Group: g, Replicas: []uint64{1, 2, 3}, State: StreamActive})
			l := leaders[name]
			v.Leaders[g] = l
			var fs []FollowerReport
			for _, id := range []uint64{1, 2, 3} {
				if id != l {
					fs = append(fs, FollowerReport{ID: id, Match: commit, Active: true})
				}
			}
			v.Reports[g] = GroupReport{Group: g, Role: roleLeader, Leader: l, Commit: commit, HighWatermark: int64(commit), Followers: fs}
		}
		return v
	}
	moves := func(plan []Transfer) (out []string) {
		for _, tr := range plan {
			out = append(out, fmt.Sprintf("%s %d→%d", tr.Stream.Name, tr.From, tr.To))
			leaders[tr.Stream.Name] = tr.To
		}
		return out
	}
	t0 := time.UnixMilli(1_000_000)
	after := time.Second
	mem := BalanceMemory{Outside: map[string]time.Time{}, Last: map[string]time.Time{}}
	plan, _, _ := PlanTransfers(view(5), &mem, t0, after) // commits seen: nothing busy, counts even
	require.Empty(t, plan)
	plan, _, _ = PlanTransfers(view(9), &mem, t0.Add(after), after) // the hot ones written since
	require.Equal(t, []string{"hot1 1→2", "hot2 1→3", "idle1 2→1", "idle4 3→1"}, moves(plan))

	// The next round's view is the servers' reports, which may not show
	// the transfers yet: busy leaders are not spread again for after.
	stale := maps.Clone(leaders)
	maps.Copy(leaders, map[string]uint64{"hot1": 1, "hot2": 1, "idle1": 2, "idle4": 3})
	plan, _, _ = PlanTransfers(view(11), &mem, t0.Add(after+after/2), after)
	require.Empty(t, moves(plan), "a view from before the transfers")
	leaders = stale

	plan, _, _ = PlanTransfers(view(13), &mem, t0.Add(3*after), after)
	require.Empty(t, moves(plan), "busy 1/1/1 and counts 3/3/3: nothing to do")
}

// A stream is written when its high watermark moves, not its commit,
// which moves with every election and transfer (the new leader's first
// entry): counted as writes, every stream created or moved looked busy for
// BusyFor.
func TestElectionsAreNoWrites(t *testing.T) {
	v := BalanceView{Streams: []Stream{{Name: "s", Group: 10, State: StreamActive}}, Reports: map[uint64]GroupReport{}}
	var mem BalanceMemory
	t0 := time.UnixMilli(1_000_000)
	for i, step := range []struct {
		term, commit uint64
		hwm          int64
		busy         bool
	}{{1, 3, 0, false}, {2, 4, 0, false}, {3, 5, 0, false}, {3, 9, 4000, true}, {4, 10, 4000, true}} {
		v.Reports[10] = GroupReport{Group: 10, Role: roleLeader, Term: step.term, Commit: step.commit, HighWatermark: step.hwm}
		busy := noteWrites(v, &mem, t0.Add(time.Duration(i)*time.Second))
		require.Equal(t, step.busy, busy[10], "step %d: term %d commit %d high watermark %d", i, step.term, step.commit, step.hwm)
	}
}

// idleView is n idle streams on three servers of one DC, their leaders
// spread evenly, every replica caught up: a settled replica set.
func idleView(n int) BalanceView {
	servers := map[uint64]Server{1: {ID: 1, DC: "a"}, 2: {ID: 2, DC: "a"}, 3: {ID: 3, DC: "a"}}
	v := BalanceView{Servers: servers, Leaders: map[uint64]uint64{}, Reports: map[uint64]GroupReport{},
		Up: map[uint64]bool{1: true, 2: true, 3: true}}
	for i := range n {
		g, l := uint64(100+i), uint64(1+i%3)
		v.Streams = append(v.Streams, Stream{Name: fmt.Sprintf("idle%05d", i), Group: g, Replicas: []uint64{1, 2, 3}, State: StreamActive})
		v.Leaders[g] = l
		rep := GroupReport{Group: g, Role: roleLeader, Leader: l, Commit: 5, HighWatermark: 0}
		for id := uint64(1); id <= 3; id++ {
			if id != l {
				rep.Followers = append(rep.Followers, FollowerReport{ID: id, Match: 5, Active: true})
			}
		}
		v.Reports[g] = rep
	}
	return v
}

// TestEvenCountsLeaveAnEvenSetAlone: with counts one apart the balancer
// plans nothing; one server leading two more than another gets one of its
// leaders moved.
func TestEvenCountsLeaveAnEvenSetAlone(t *testing.T) {
	v := idleView(31) // 11, 10, 10
	mem := BalanceMemory{Outside: map[string]time.Time{}, Last: map[string]time.Time{}}
	now := time.UnixMilli(1_000_000)
	plan, _, _ := PlanTransfers(v, &mem, now, time.Second)
	require.Empty(t, plan)

	v.Leaders[101] = 1 // 12, 9, 10
	rep := v.Reports[101]
	rep.Leader, rep.Followers = 1, []FollowerReport{{ID: 2, Match: 5, Active: true}, {ID: 3, Match: 5, Active: true}}
	v.Reports[101] = rep
	plan, _, _ = PlanTransfers(v, &mem, now, time.Second)
	require.Len(t, plan, 1)
	require.Equal(t, uint64(1), plan[0].From)
	require.Equal(t, uint64(2), plan[0].To)
}

// BenchmarkPlanTransfers: one balancer round over 10,000 settled idle
// streams (every second on the config servers' leader).
func BenchmarkPlanTransfers(b *testing.B) {
	v := idleView(10_000)
	mem := BalanceMemory{Outside: map[string]time.Time{}, Last: map[string]time.Time{}}
	now := time.UnixMilli(1_000_000)
	b.ReportAllocs()
	for i := range b.N {
		plan, _, _ := PlanTransfers(v, &mem, now.Add(time.Duration(i)*time.Second), time.Second)
		require.Empty(b, plan)
	}
}
