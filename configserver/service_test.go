package configserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vdl-project/vdl/internal/testnet"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return testnet.FreeAddr(t)
}

type testCluster struct {
	t     *testing.T
	cfgs  []Config
	svcs  []*Service
	addrs []string
}

// startConfigServers starts three insecure config servers on loopback.
func startConfigServers(t *testing.T) *testCluster {
	t.Helper()
	return startConfigServersWith(t, nil)
}

// startConfigServersWith starts three insecure config servers on
// loopback, their configurations changed by mod.
func startConfigServersWith(t *testing.T, mod func(*Config)) *testCluster {
	t.Helper()
	dir := t.TempDir()
	var peers []Peer
	for i := 1; i <= 3; i++ {
		peers = append(peers, Peer{ID: uint64(i), Raft: freeAddr(t), API: freeAddr(t)})
	}
	tc := &testCluster{t: t}
	for _, p := range peers {
		cfg := Config{ID: p.ID, DataDir: filepath.Join(dir, fmt.Sprint(p.ID)), RaftListen: p.Raft, APIListen: p.API,
			Peers: peers, Insecure: true, DownAfterMs: 1500, TickMs: 20}
		if mod != nil {
			mod(&cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
		tc.addrs = append(tc.addrs, p.API)
		tc.svcs = append(tc.svcs, nil)
		tc.start(int(p.ID) - 1)
	}
	t.Cleanup(func() {
		for _, s := range tc.svcs {
			if s != nil {
				s.Close()
			}
		}
	})
	return tc
}

func (tc *testCluster) start(i int) {
	s, err := Start(tc.cfgs[i], nil)
	require.NoError(tc.t, err)
	tc.svcs[i] = s
}

func (tc *testCluster) leader() int {
	tc.t.Helper()
	var idx int
	require.Eventually(tc.t, func() bool {
		for i, s := range tc.svcs {
			if s != nil && s.isLeader() {
				idx = i
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	return idx
}

func report(id uint64, dc string, groups ...GroupReport) Report {
	return Report{Server: Server{ID: id, Kafka: fmt.Sprintf("k%d", id), Raft: fmt.Sprintf("r%d", id), DC: dc}, Groups: groups, Version: -1}
}

func TestConfigServersCreateReportDeleteAcrossFailover(t *testing.T) {
	tc := startConfigServers(t)
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc.leader()

	// Before three servers report, nothing can be placed.
	_, err := cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.ErrorIs(t, err, ErrPlacement)
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c", 4: "a"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	st, err := cl.CreateStream(ctx, StreamSpec{Name: "orders", PreferredDC: "b"})
	require.NoError(t, err)
	require.Len(t, st.Replicas, 3)
	require.Equal(t, uint64(2), st.Replicas[0], "the preferred leader is in the preferred dc")
	_, err = cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.ErrorIs(t, err, ErrExists)
	_, err = cl.CreateStream(ctx, StreamSpec{Name: "bad name"})
	require.ErrorIs(t, err, ErrInvalid)

	// The offsets stream appears once three servers are up.
	require.Eventually(t, func() bool {
		a, err := cl.Report(ctx, report(1, "a"))
		if err != nil {
			return false
		}
		for _, s := range a.Streams {
			if s.Name == OffsetsStream && s.Group == OffsetsGroup {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond)

	// Another leader serves the same state.
	old := tc.leader()
	require.NoError(t, tc.svcs[old].Close())
	tc.svcs[old] = nil
	tc.leader()
	got, err := cl.Stream(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, st.Group, got.Group)
	cs, err := cl.Cluster(ctx)
	require.NoError(t, err)
	require.Len(t, cs.Servers, 4)
	require.Contains(t, cs.View, "stale view", "a new leader says it cannot tell down from unknown yet")

	// Delete: the replicas are told; the tombstone goes once none hosts it.
	require.NoError(t, cl.DeleteStream(ctx, "orders"))
	_, err = cl.Stream(ctx, "orders")
	require.ErrorIs(t, err, ErrNotFound)
	hosting := GroupReport{Group: st.Group, Role: "follower"}
	for _, id := range st.Replicas {
		a, err := cl.Report(ctx, report(id, "x", hosting))
		require.NoError(t, err)
		require.Contains(t, a.Deleted, st.Group)
	}
	time.Sleep(time.Second)
	all, err := cl.Streams(ctx)
	require.NoError(t, err)
	require.True(t, hasGroup(all, st.Group), "still hosted: not purged")
	require.Eventually(t, func() bool {
		for id := uint64(1); id <= 4; id++ {
			if _, err := cl.Report(ctx, report(id, "x")); err != nil {
				return false
			}
		}
		all, err := cl.Streams(ctx)
		return err == nil && !hasGroup(all, st.Group)
	}, 15*time.Second, 200*time.Millisecond)
	ops, err := cl.Ops(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, CmdPurge, ops[len(ops)-1].Kind)
}

func hasGroup(sts []StreamStatus, g uint64) bool {
	for _, s := range sts {
		if s.Group == g {
			return true
		}
	}
	return false
}

// The leader dies while creates are in flight: each create either
// succeeded or failed cleanly, retrying a failed one finds it created
// (exists) or creates it, and no stream is there twice or on a reused
// group.
func TestCreatesAcrossLeaderLoss(t *testing.T) {
	tc := startConfigServers(t)
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc.leader()
	for id := uint64(1); id <= 3; id++ {
		_, err := cl.Report(ctx, report(id, ""))
		require.NoError(t, err)
	}
	const n = 30
	results := make(chan error, n)
	go func() {
		for i := range n {
			_, err := cl.CreateStream(ctx, StreamSpec{Name: fmt.Sprintf("s%02d", i)})
			results <- err
		}
	}()
	time.Sleep(50 * time.Millisecond)
	old := tc.leader()
	require.NoError(t, tc.svcs[old].Close())
	tc.svcs[old] = nil
	var failed []int
	for i := range n {
		if err := <-results; err != nil {
			failed = append(failed, i)
		}
	}
	// The new leader needs the servers' reports to place streams again.
	tc.leader()
	require.Eventually(t, func() bool {
		for id := uint64(1); id <= 3; id++ {
			if _, err := cl.Report(ctx, report(id, "")); err != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 100*time.Millisecond)
	for _, i := range failed {
		_, err := cl.CreateStream(ctx, StreamSpec{Name: fmt.Sprintf("s%02d", i)})
		if err != nil {
			require.ErrorIs(t, err, ErrExists, "s%02d", i)
		}
	}
	all, err := cl.Streams(ctx)
	require.NoError(t, err)
	names, groups := map[string]bool{}, map[uint64]bool{}
	for _, st := range all {
		require.False(t, names[st.Name], "%s twice", st.Name)
		require.False(t, groups[st.Group], "group %d twice", st.Group)
		names[st.Name], groups[st.Group] = true, true
	}
	for i := range n {
		require.True(t, names[fmt.Sprintf("s%02d", i)])
	}
	t.Logf("%d of %d creates failed with the leader and were retried", len(failed), n)
}

// /metrics passes promtool (when installed) and counts what it should.
func TestConfigServerMetrics(t *testing.T) {
	tc := startConfigServers(t)
	i := tc.leader()
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for id := uint64(1); id <= 3; id++ {
		_, err := cl.Report(ctx, report(id, ""))
		require.NoError(t, err)
	}
	_, err := cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.NoError(t, err)
	resp, err := http.Get("http://" + tc.addrs[i] + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	require.Contains(t, text, "vdl_configserver_is_leader 1")
	require.Regexp(t, `vdl_configserver_streams\{state="active"\} [12]\n`, text, "orders (and __consumer_offsets once made)")
	require.Contains(t, text, `vdl_configserver_servers{health="up"} 3`)
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
}

// A server hosting thousands of groups reports them all: its report is
// larger than other requests may be (1 MiB) and must still be heard, or
// the server is marked down and its new streams never reach it.
func TestLargeReportIsHeard(t *testing.T) {
	tc := startConfigServers(t)
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc.leader()
	var groups []GroupReport
	for g := range uint64(12000) {
		groups = append(groups, GroupReport{Group: firstStreamGroupID + g, Role: roleLeader, Leader: 1, Term: 3, Commit: 10, Applied: 10,
			Voters: []uint64{1, 2, 3}, Followers: []FollowerReport{{ID: 2, Match: 10, Active: true}, {ID: 3, Match: 10, Active: true}}})
	}
	rep := report(1, "a", groups...)
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Greater(t, len(b), maxBody, "the report must be larger than other requests may be")
	_, err = cl.Report(ctx, rep)
	require.NoError(t, err)
}

// A body over the limit is refused saying so.
func TestBodyOverItsLimitIsRefusedSayingSo(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/report", strings.NewReader(`{"server":{"id":1},"groups":[`+strings.Repeat(`{"group":1},`, 100)+`]}`))
	var rep Report
	err := decodeBodyUpTo(r, &rep, 64)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "request body larger than 64 bytes")
}
