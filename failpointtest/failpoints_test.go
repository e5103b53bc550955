package failpointtest

import (
	"github.com/vdl-project/vdl/server"

	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// allFailpoints is every failpoint VDL registers, with the test that
// observes its effect. TestPartitionsAndDelays checks it against the live
// registry of a running failpoint build, so a new failpoint without a test
// here fails.
var allFailpoints = map[string]string{
	"storage/beforeWrite":             "TestCrashes (crash), TestIOErrors (eio)",
	"storage/tornWrite":               "TestCrashes",
	"storage/afterWrite":              "TestCrashes, TestFailpointPowerLoss (powerloss)",
	"storage/beforeSync":              "TestCrashes (crash), TestIOErrors (eio)",
	"storage/afterSync":               "TestCrashes",
	"storage/segmentRoll":             "TestCrashes (crash), TestIOErrors (eio)",
	"storage/indexFlush":              "TestCrashes",
	"storage/beforeRecovery":          "TestIOErrors",
	"raftnode/beforeSave":             "TestCrashes",
	"raftnode/afterSave":              "TestCrashes",
	"raftnode/beforeLeaderSend":       "TestPartitionsAndDelays",
	"raftnode/beforeFollowerSend":     "TestPartitionsAndDelays",
	"raftnode/dropTo":                 "TestPartitionsAndDelays",
	"raftnode/dropFrom":               "TestPartitionsAndDelays",
	"raftnode/beforeTick":             "TestPowerLossAndReads (fetch from a deposed leader: its clock slows)",
	"raftnode/beforeApply":            "TestPartitionsAndDelays (sleep), TestCrashes",
	"raftnode/afterApply":             "TestPartitionsAndDelays (sleep), TestCrashes",
	"raftnode/beforeSnapshotSend":     "TestSnapshot",
	"raftnode/beforeSnapshotInstall":  "TestSnapshot",
	"kafka/afterCommitBeforeResponse": "TestCrashes (crash), TestPartitionsAndDelays (sleep)",
	"kafka/beforeRequest":             "TestPartitionsAndDelays",
	"configserver/beforeReportAnswer": "TestConfigServerFailpoints (sleep)",
	"configserver/afterPropose":       "TestConfigServerFailpoints (crash: the retried create finds it made)",
	"configserver/beforePropose":      "TestConfigServerFailpoints (crash: the stream never exists)",
	"configserver/beforeTransfer":     "TestConfigServerFailpoints (crash before the balancer's transfer)",
}

// TestPartitionsAndDelays, on one cluster: the registry lists exactly
// allFailpoints; each message-drop failpoint cuts a follower off (its
// applied index, or the leader's view of it, stops while the others
// advance) and it catches up once the failpoint is disabled; each sleep
// delays produces by at least the sleep; beforeRequest=return(true) drops
// the client's connection. Hit counts go up.
func TestPartitionsAndDelays(t *testing.T) {
	c := startCluster(t, fpBin)

	infos, err := fp(c.Nodes[0]).List()
	require.NoError(t, err)
	var names []string
	for _, in := range infos {
		if strings.HasPrefix(in.Name, "failpoints/internal/") {
			continue
		}
		names = append(names, in.Name)
		assert.Equal(t, failpoints.Module+"/"+in.Name, in.FullName)
		assert.NotEmpty(t, in.Place, in.Name)
		assert.NotEmpty(t, in.Effect, in.Name)
		assert.False(t, in.Enabled, in.Name)
	}
	var want []string
	for n := range allFailpoints {
		want = append(want, n)
	}
	sort.Strings(names)
	sort.Strings(want)
	require.Equal(t, want, names, "registered failpoints vs the ones this package tests")

	l := &ledger{}
	leader := c.waitLeader(30 * time.Second)
	fs := c.followers(leader)
	f, o := fs[0], fs[1]
	cl := c.client(leader)
	defer cl.Close()

	// cutOff enables name=term on node on, and checks that follower f stops
	// applying while the leader goes on, then that f catches up.
	cutOff := func(on *node, name, term string) {
		t.Logf("%s=%s on node %d: follower %d must stop receiving", name, term, on.ID, f.ID)
		h0 := c.hits(on, name)
		c.enable(on, name, term)
		time.Sleep(500 * time.Millisecond) // messages in flight land
		f0, l0 := c.mustStatus(f).Applied, c.mustStatus(leader).Applied
		require.Equal(t, 5, c.produceN(l, cl, "cut", 5, 100), "the leader and the other follower are a quorum")
		time.Sleep(time.Second)
		f1, l1 := c.mustStatus(f).Applied, c.mustStatus(leader).Applied
		assert.GreaterOrEqual(t, l1, l0+5, "the leader applies")
		assert.GreaterOrEqual(t, c.mustStatus(o).Applied, l0+5, "the other follower applies")
		assert.Equal(t, f0, f1, "the cut-off follower must not apply anything")
		assert.Greater(t, c.hits(on, name), h0, "hits")
		c.disable(on, name)
		assert.True(t, waitFor(15*time.Second, func() bool { return c.mustStatus(f).Applied >= l1 }),
			"follower %d did not catch up after %s was disabled", f.ID, name)
	}
	cutOff(leader, "raftnode/dropTo", fmt.Sprintf("return(%d)", f.ID))
	cutOff(f, "raftnode/dropFrom", fmt.Sprintf("return(%d)", leader.ID))
	cutOff(leader, "raftnode/beforeLeaderSend", fmt.Sprintf("return(%d)", f.ID))

	// The follower's answers to the leader are dropped: the leader's view of
	// it (Match) stops while the other follower's advances.
	{
		name := "raftnode/beforeFollowerSend"
		t.Logf("%s=return(%d) on node %d", name, leader.ID, f.ID)
		c.enable(f, name, fmt.Sprintf("return(%d)", leader.ID))
		time.Sleep(300 * time.Millisecond)
		st := c.mustStatus(leader)
		mf, mo := st.Progress[f.ID].Match, st.Progress[o.ID].Match
		require.Equal(t, 5, c.produceN(l, cl, "resp", 5, 100))
		time.Sleep(time.Second)
		st = c.mustStatus(leader)
		assert.Equal(t, mf, st.Progress[f.ID].Match, "the leader must not hear from follower %d", f.ID)
		assert.GreaterOrEqual(t, st.Progress[o.ID].Match, mo+5)
		assert.Greater(t, c.hits(f, name), uint64(0))
		c.disable(f, name)
		assert.True(t, waitFor(15*time.Second, func() bool {
			st := c.mustStatus(leader)
			return st.Progress[f.ID].Match >= st.Progress[o.ID].Match
		}), "the leader did not hear from follower %d again", f.ID)
	}

	// Delays: one produce through a sleeping Kafka failpoint.
	require.NoError(t, l.produce(cl, l.value("warm", 100)))
	for _, name := range []string{"kafka/beforeRequest", "kafka/afterCommitBeforeResponse"} {
		c.enable(leader, name, "sleep(400)")
		t0 := time.Now()
		require.NoError(t, l.produce(cl, l.value("slow", 100)), name)
		d := time.Since(t0)
		c.disable(leader, name)
		t.Logf("%s=sleep(400): produce took %s", name, d)
		assert.GreaterOrEqual(t, d, 400*time.Millisecond, name)
		assert.Greater(t, c.hits(leader, name), uint64(0), name)
	}
	// Apply delays stall the leader's core after each apply: produces one
	// after another wait for the previous one's sleep.
	for _, name := range []string{"raftnode/beforeApply", "raftnode/afterApply"} {
		require.NoError(t, l.produce(cl, l.value("warm", 100)))
		c.enable(leader, name, "sleep(300)")
		t0 := time.Now()
		for range 4 {
			require.NoError(t, l.produce(cl, l.value("apply", 100)), name)
		}
		d := time.Since(t0)
		c.disable(leader, name)
		t.Logf("%s=sleep(300): 4 produces took %s", name, d)
		assert.GreaterOrEqual(t, d, 800*time.Millisecond, name)
		assert.GreaterOrEqual(t, c.hits(leader, name), uint64(3), name)
	}

	// A dropped connection: every request of the connection is refused.
	{
		name := "kafka/beforeRequest"
		h0 := c.hits(leader, name)
		c.enable(leader, name, "return(true)")
		assert.Error(t, l.produce(cl, l.value("drop", 100)), "a produce over a dropped connection")
		assert.Greater(t, c.hits(leader, name), h0)
		c.disable(leader, name)
		assert.True(t, waitFor(10*time.Second, func() bool { return l.produce(cl, l.value("after", 100)) == nil }))
	}
	c.checkNoAckedLoss(l)
}

// TestCrashes: for each crash failpoint, return(true) on the leader or a
// follower while a producer (acks=all, no retries) writes; the process must
// die by SIGKILL (the failpoint's crash), restart on its data, and the
// cluster serve again. At the end every acknowledged value is in the
// stream exactly once, and the value that was committed but never answered
// (kafka/afterCommitBeforeResponse) is in it too.
func TestCrashes(t *testing.T) {
	cases := []struct {
		name     string
		onLeader bool
		size     int // record size: 16 KiB ones roll the 256 KiB segments
		short    bool
	}{
		{"storage/beforeSync", true, 100, true},
		{"storage/afterSync", true, 100, true},
		{"storage/tornWrite", true, 4096, true},
		{"raftnode/afterSave", true, 100, true},
		{"storage/beforeWrite", true, 100, false},
		{"storage/afterWrite", false, 100, false},
		{"storage/segmentRoll", false, 16 << 10, false},
		{"storage/indexFlush", true, 16 << 10, false},
		{"raftnode/beforeSave", false, 100, false},
		{"raftnode/beforeApply", false, 100, false},
		{"raftnode/afterApply", true, 100, false},
	}
	c := startCluster(t, fpBin)
	l := &ledger{}
	for _, cc := range cases {
		if testing.Short() && !cc.short {
			continue
		}
		leader := c.waitLeader(30 * time.Second)
		target := leader
		if !cc.onLeader {
			target = c.followers(leader)[0]
		}
		role := map[bool]string{true: "leader", false: "follower"}[cc.onLeader]
		t.Logf("%s=return(true) on node %d (%s)", cc.name, target.ID, role)
		cl := c.client()
		c.produceN(l, cl, "pre", 3, cc.size)
		c.enable(target, cc.name, "return(true)")
		start := time.Now()
		for target.Running() && time.Since(start) < 20*time.Second {
			_ = l.produce(cl, l.value("crash", cc.size))
		}
		cl.Close()
		c.waitCrash(target, 5*time.Second)
		t.Logf("%s: node %d crashed after %s; restarting", cc.name, target.ID, time.Since(start).Round(time.Millisecond))
		c.Restart(target.ID)
	}

	// Committed, never answered: the response is lost with the process, the
	// write is not.
	leader := c.waitLeader(30 * time.Second)
	cl := c.client(leader)
	const unanswered = "committed-but-not-answered"
	c.enable(leader, "kafka/afterCommitBeforeResponse", "return(true)")
	assert.Error(t, produce(cl, unanswered), "the server died before answering")
	cl.Close()
	c.waitCrash(leader, 5*time.Second)
	c.Restart(leader.ID)

	got := c.checkNoAckedLoss(l)
	assert.Contains(t, got, unanswered, "the produce committed before the crash")
	// Every replica ends with the same log.
	assert.True(t, waitFor(15*time.Second, func() bool {
		var hw []int64
		for _, n := range c.Nodes {
			hw = append(hw, c.mustStatus(n).HighWatermark)
		}
		return hw[0] == hw[1] && hw[1] == hw[2]
	}), "replicas disagree on the high watermark")
}

// TestIOErrors: an injected EIO (return("eio")) in fsync, in a write, in a
// segment roll makes the server fail-stop rather than acknowledge
// un-durable data: it logs why and exits with status 3 (for a supervisor
// to restart it), and until then never advertises leadership; the others
// go on. Restarted, it serves again and nothing acknowledged is lost.
// storage/beforeRecovery (set with GO_FAILPOINTS at start-up) makes Open
// fail: the server refuses to start.
func TestIOErrors(t *testing.T) {
	c := startCluster(t, fpBin)
	l := &ledger{}
	cases := []struct {
		name     string
		onLeader bool
		size     int
	}{
		{"storage/beforeSync", true, 100},
		{"storage/beforeWrite", false, 100},
		{"storage/segmentRoll", false, 16 << 10},
	}
	for _, cc := range cases {
		leader := c.waitLeader(30 * time.Second)
		target := leader
		if !cc.onLeader {
			target = c.followers(leader)[0]
		}
		t.Logf(`%s=return("eio") on node %d`, cc.name, target.ID)
		c.enable(target, cc.name, `return("eio")`)
		cl := c.client(leader)
		start := time.Now()
		for target.Running() && time.Since(start) < 20*time.Second {
			_ = l.produce(cl, l.value("eio", cc.size))
		}
		cl.Close()
		err := c.WaitExit(target.ID, 20*time.Second)
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "node %d after %s", target.ID, cc.name)
		assert.Equal(t, server.ExitFailStop, ee.ExitCode(), "a fail-stop exits with its own status")
		assert.Contains(t, proccluster.Tail(target.LogPath, 10), "server fail-stopped", "the server says why it stops")
		// The others serve (a new leader if it was the leader).
		var others []*node
		for _, n := range c.Nodes {
			if n != target {
				others = append(others, n)
			}
		}
		// A fresh client per attempt: one that met the election (no leader
		// yet, and no retries) keeps failing from its cached metadata.
		assert.True(t, waitFor(20*time.Second, func() bool {
			ocl := c.client(others...)
			defer ocl.Close()
			return l.produce(ocl, l.value("others", 100)) == nil
		}), "the other nodes do not serve")
		c.Restart(target.ID)
	}

	// Recovery fails at start-up.
	leader := c.waitLeader(30 * time.Second)
	f := c.followers(leader)[0]
	c.Kill(f.ID)
	c.StartNode(f.ID, "GO_FAILPOINTS="+failpoints.FullName("storage/beforeRecovery")+`=return(true)`)
	err := c.WaitExit(f.ID, 20*time.Second)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, ee.ExitCode(), "the server refuses to start")
	assert.Contains(t, proccluster.Tail(f.LogPath, 10), "injected I/O error")
	c.Restart(f.ID)

	c.checkNoAckedLoss(l)
}

// TestSnapshot: a follower that missed entries the leader no longer has
// (retention) needs a snapshot. With beforeSnapshotSend=return(id) on the
// leader it gets none and stays behind; with beforeSnapshotInstall on the
// follower it crashes (SIGKILL) when the snapshot arrives; restarted without
// failpoints it installs the snapshot and catches up.
func TestSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := startCluster(t, fpBin)
	l := &ledger{}
	leader := c.waitLeader(30 * time.Second)
	f := c.followers(leader)[0]
	c.Kill(f.ID)

	cl := c.client(leader)
	require.Equal(t, 60, c.produceN(l, cl, "snap", 60, 16<<10), "about four segments")
	cl.Close()
	hwm := c.mustStatus(leader).HighWatermark
	resp, err := leader.AdminClient.Post(fmt.Sprintf("%s/streams/%s/retain?before=%d", leader.AdminBase, stream, hwm-5), "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, waitFor(10*time.Second, func() bool { return c.mustStatus(leader).StartOffset > 0 }))
	start := c.mustStatus(leader).StartOffset
	t.Logf("retention: the leader's log starts at offset %d of %d", start, hwm)

	send, install := "raftnode/beforeSnapshotSend", "raftnode/beforeSnapshotInstall"
	c.enable(leader, send, fmt.Sprintf("return(%d)", f.ID))
	c.Restart(f.ID)
	require.True(t, waitFor(15*time.Second, func() bool { return c.hits(leader, send) > 0 }), "no snapshot was sent")
	time.Sleep(time.Second)
	assert.Less(t, c.mustStatus(f).Applied, c.mustStatus(leader).Applied, "the follower got no snapshot: it stays behind")
	assert.Equal(t, int64(0), c.mustStatus(f).StartOffset)

	c.enable(f, install, "return(true)")
	c.disable(leader, send)
	c.waitCrash(f, 20*time.Second)
	c.Restart(f.ID)
	assert.True(t, waitFor(30*time.Second, func() bool {
		fs, ls := c.mustStatus(f), c.mustStatus(leader)
		return fs.Applied >= ls.Applied && fs.StartOffset == ls.StartOffset && fs.HighWatermark == ls.HighWatermark
	}), "the follower did not install the snapshot and catch up")
	fs := c.mustStatus(f)
	t.Logf("follower %d: start offset %d, high watermark %d", f.ID, fs.StartOffset, fs.HighWatermark)
}
