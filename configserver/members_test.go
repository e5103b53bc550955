package configserver

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
)

func memberOf(t *testing.T, cs ConfigServers, id uint64) ConfigServerStatus {
	t.Helper()
	for _, m := range cs.Members {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("config server %d not listed", id)
	return ConfigServerStatus{}
}

// TestReplaceConfigServerWithLostDataDir: a config server loses its data
// dir and is refused; a removal that would lose the quorum is refused;
// remove + add bring it back as a new member that catches up from a
// snapshot of a compacted log (and a copy of the state), ends with the same
// catalog as the others, and serves creates when it leads. On real files
// and loopback TCP.
func TestReplaceConfigServerWithLostDataDir(t *testing.T) {
	tc := startConfigServersWith(t, func(c *Config) { c.CompactAfter, c.LogSegmentBytes = 20, 4096 })
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tc.leader()
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	_, err := cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.NoError(t, err)

	lead := tc.leader()
	victim, other := (lead+1)%3, (lead+2)%3
	vid, oid, lid := tc.cfgs[victim].ID, tc.cfgs[other].ID, tc.cfgs[lead].ID
	require.NoError(t, tc.svcs[victim].Close())
	tc.svcs[victim] = nil
	require.NoError(t, os.RemoveAll(tc.cfgs[victim].DataDir))
	tc.start(victim) // initial_cluster_state "new", as in its TOML
	require.Eventually(t, func() bool {
		cs, err := cl.ConfigServers(ctx)
		return err == nil && memberOf(t, cs, vid).Health == "refused"
	}, 10*time.Second, 100*time.Millisecond, "the leader says the config server with a lost data dir is refused")
	last, err := tc.svcs[victim].slog.LastIndex()
	require.NoError(t, err)
	require.Zero(t, last, "it founded a group of its own")

	// Removals that would leave no healthy quorum are refused, and say why.
	err = cl.RemoveConfigServer(ctx, oid)
	require.ErrorIs(t, err, ErrMembership)
	require.Contains(t, err.Error(), "lose their quorum")
	err = cl.RemoveConfigServer(ctx, lid)
	require.ErrorIs(t, err, ErrMembership)
	err = cl.AddConfigServer(ctx, vid)
	require.ErrorIs(t, err, ErrMembership, "already a member")
	err = cl.RemoveConfigServer(ctx, 9)
	require.ErrorIs(t, err, ErrNotFound)

	require.NoError(t, cl.RemoveConfigServer(ctx, vid))
	cs, err := cl.ConfigServers(ctx)
	require.NoError(t, err)
	require.Equal(t, "none", memberOf(t, cs, vid).Role)
	// The group goes on with two, and compacts its log meanwhile.
	for i := range 60 {
		_, err := cl.AlterStream(ctx, "orders", StreamChange{RetentionMs: new(int64(1000 + i))})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return tc.svcs[tc.leader()].slog.StartOffset() > 0
	}, 10*time.Second, 50*time.Millisecond, "the log was compacted")
	require.Zero(t, tc.svcs[victim].state.Applied())

	require.NoError(t, cl.AddConfigServer(ctx, vid))
	require.Eventually(t, func() bool {
		cs, err := cl.ConfigServers(ctx)
		m := memberOf(t, cs, vid)
		return err == nil && m.Role == "voter" && m.Health == "up"
	}, 30*time.Second, 100*time.Millisecond, "the new config server was promoted once caught up")
	require.True(t, tc.svcs[victim].ident.Joined, "it joined, it did not found")

	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} { // down after 1.5 s
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	_, err = cl.CreateStream(ctx, StreamSpec{Name: "after"})
	require.NoError(t, err)
	requireSameCatalog(t, tc)

	// It leads, and serves creates.
	require.NoError(t, cl.TransferConfigLeader(ctx, vid))
	require.Eventually(t, func() bool { return tc.svcs[victim].isLeader() }, 10*time.Second, 50*time.Millisecond)
	only := NewClient([]string{tc.addrs[victim]}, false, nil)
	require.Eventually(t, func() bool { // a new leader places once it heard the servers
		for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
			if _, err := only.Report(ctx, report(id, dc)); err != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 100*time.Millisecond)
	st, err := only.CreateStream(ctx, StreamSpec{Name: "through-the-new-one"})
	require.NoError(t, err)
	require.Len(t, st.Replicas, 3)
	requireSameCatalog(t, tc)
}

// requireSameCatalog waits until every config server applied the same
// commands and has the same catalog (compared together: a command may be
// applied between two reads).
func requireSameCatalog(t *testing.T, tc *testCluster) {
	t.Helper()
	var diff string
	ok := assert.Eventually(t, func() bool {
		dump := func(s *Service) string {
			return fmt.Sprint(s.state.Applied(), s.state.Servers(), s.state.Streams(), s.state.Version())
		}
		want := dump(tc.svcs[0])
		for _, s := range tc.svcs[1:] {
			if got := dump(s); got != want {
				diff = want + "\n" + got
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	require.True(t, ok, "every config server has the same catalog; last difference:\n%s", diff)
}

// A member whose data dir is refused counts as down when a removal is
// checked, though raft still calls it recently active (from before it
// lost its data dir): removing another voter would leave the leader with
// only that one, which cannot vote. CI saw that removal let through when
// the refused member had been restarted within an election timeout.
func TestRemovalCountsARefusedMemberDown(t *testing.T) {
	active := raftnode.Progress{RecentActive: true, Match: 10}
	st := rfStatus{Leader: 1, Commit: 10, Voters: []uint64{1, 2, 3},
		Progress: map[uint64]raftnode.Progress{1: active, 2: active, 3: {RecentActive: true, Match: 4}}}
	none := func(uint64) bool { return false }
	three := func(v uint64) bool { return v == 3 }

	require.NoError(t, checkRemoval(st, 1, 2, none), "all three heard from")
	err := checkRemoval(st, 1, 2, three)
	require.ErrorIs(t, err, ErrMembership)
	require.Contains(t, err.Error(), "lose their quorum")
	require.NoError(t, checkRemoval(st, 1, 3, three), "the refused one itself may go")
	require.Equal(t, uint64(2), handOver(st, 1, three))
	require.Zero(t, handOver(st, 1, func(v uint64) bool { return v != 1 }), "no healthy voter but the leader")
}
