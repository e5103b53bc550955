package failpointtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// Real processes losing power, and reading where they must not. The
// failpoint build runs its data dir on vfs.Lazy: a power loss
// (POST /debug/power-loss) loses exactly what was never synced, and the
// restarted server checks its logs against what it had reported durable
// (raftnode.Durable, GET /debug/durability), as the simulator does.
//
// Each scenario returns what it found wrong. On the plain failpoint build
// it must find nothing; with the canary it targets switched on
// (VDL_CANARY: the failpoint build carries the canaries) it must find
// something: the real-process checks can fail, like the simulator's.

type scenario struct {
	name   string
	canary canary.Name
	run    func(t *testing.T, env []string) []string
	// tries is how many runs may be needed to catch the canary (0: one).
	tries int
}

var scenarios = []scenario{
	// The cut catches acknowledge-before-fsync only if a write came after
	// the last fsync before it, which is left to timing: on 4 December it
	// missed in 3 of 37 runs of the day's code (in CI once), 0 of 20 of
	// the code before and 0 of 14 of the day's code without its transport
	// change (none of the changes touches the write path; too few runs to
	// tell them from chance). So it gets a second run.
	{"power loss under load", canary.AckBeforeFsync, powerLossUnderLoad, 2},
	{"power loss after a vote", canary.HardStateNotSynced, powerLossAfterVote, 0},
	{"power loss after a membership change", canary.ConfStateNotReplayed, powerLossAfterMembership, 0},
	{"fetch from a follower", canary.FollowerServesFetch, fetchFromFollower, 0},
	{"fetch of an uncommitted record", canary.ReadAboveHWM, fetchUncommitted, 0},
	{"fetch from a deposed leader", canary.NoReadFence, fetchFromDeposedLeader, 0},
}

// TestPowerLossAndReads: the real processes keep what they acknowledged
// through power losses and never serve a stale or uncommitted read.
func TestPowerLossAndReads(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			found := sc.run(t, nil)
			require.Empty(t, found)
		})
	}
}

// TestRealProcessCanaries: each scenario catches the canary it targets.
func TestRealProcessCanaries(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(string(sc.canary), func(t *testing.T) {
			var found []string
			for try := 1; len(found) == 0 && try <= max(1, sc.tries); try++ {
				if try > 1 {
					t.Logf("run %d: the first did not catch canary %s", try, sc.canary)
				}
				found = sc.run(t, []string{"VDL_CANARY=" + string(sc.canary)})
			}
			require.NotEmpty(t, found, "the %s scenario did not catch canary %s", sc.name, sc.canary)
			t.Logf("canary %s caught by %q: %v", sc.canary, sc.name, found)
		})
	}
}

// waitForEvery polls cond every period until it holds or timeout passes.
func waitForEvery(timeout, period time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(period)
	}
	return cond()
}

// startEnv starts three failpoint-build nodes with env.
func startEnv(t *testing.T, env []string) *cluster {
	t.Helper()
	c := &cluster{t: t, Cluster: proccluster.Start(t, fpBin, proccluster.Options{
		Nodes: 3, SegmentBytes: 256 << 10, StartTimeout: 30 * time.Second, TailLines: 200, Env: env})}
	c.waitLeader(30 * time.Second)
	return c
}

// awaitGrowth waits until some node's log grew (written past its stalled
// fsyncs), at most d: a cut after a fixed pause found nothing unsynced when
// the producers happened to be waiting (as the campaign's did, 8edbb75).
func (c *cluster) awaitGrowth(d time.Duration) {
	ends := func() int64 {
		var total int64
		for _, n := range c.Nodes {
			if st, err := c.StreamStatus(n.ID, stream); err == nil {
				total += st.EndOffset
			}
		}
		return total
	}
	start := ends()
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ends() <= start; {
		time.Sleep(20 * time.Millisecond)
	}
}

// powerLossOf cuts the power of nodes at once.
func (c *cluster) powerLossOf(nodes ...*node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { c.PowerLoss(n.ID) })
	}
	wg.Wait()
}

// violations restarts the nodes and collects what each found lost of what
// it had reported durable.
func (c *cluster) restartAndCheck(nodes ...*node) []string {
	c.t.Helper()
	var found []string
	for _, n := range nodes {
		c.Restart(n.ID)
		v, err := c.Durability(n.ID)
		require.NoError(c.t, err)
		for _, s := range v {
			found = append(found, fmt.Sprintf("node %d: %s", n.ID, s))
		}
	}
	return found
}

// powerLossUnderLoad: producers write while every server loses power at
// once; nothing acknowledged may be missing afterwards, and no server may
// have lost what it reported durable (acknowledging before the fsync
// loses both).
func powerLossUnderLoad(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	// Slow fsyncs (as on a busy disk) keep written, not yet synced data
	// around whenever the power goes.
	for _, n := range c.Nodes {
		c.enable(n, "storage/beforeSync", "sleep(100)")
	}
	l := &ledger{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() {
			cl := c.client()
			defer cl.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = l.produce(cl, l.value(fmt.Sprintf("p%d", p), 200))
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	// Then every fsync stalls: correct code stops acknowledging; code that
	// acknowledges before its fsync goes on, and the power cut below finds
	// what it acknowledged unsynced (left to chance, the cut missed it in
	// about one run in ten).
	for _, n := range c.Nodes {
		c.enable(n, "storage/beforeSync", "sleep(5000)")
	}
	time.Sleep(200 * time.Millisecond) // a sync begun before the stall ends
	c.awaitGrowth(3 * time.Second)
	c.powerLossOf(c.Nodes...)
	close(stop)
	wg.Wait()
	found := c.restartAndCheck(c.Nodes...)
	leader := c.waitLeader(30 * time.Second)
	got := map[string]bool{}
	for _, v := range c.readAll(leader) {
		got[v] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.acked {
		if !got[v] {
			found = append(found, fmt.Sprintf("acknowledged value %.16s… lost", v))
		}
	}
	t.Logf("%d acknowledged, %d unknown", len(l.acked), len(l.unknown))
	return found
}

// powerLossAfterVote: the leader dies and every fsync of the others is
// held up 6s from then on: a vote (or a term) they report durable before
// that, without its own fsync, is lost by the power loss that follows the
// election (a vote not synced lets a server vote twice in a term). With
// correct code no vote is reported before its fsync, so the election may
// not even end before the power goes: nothing is promised, nothing lost.
func powerLossAfterVote(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	leader := c.waitLeader(30 * time.Second)
	others := c.followers(leader)
	for _, n := range others {
		c.enable(n, "storage/beforeSync", "sleep(6000)")
	}
	c.Kill(leader.ID)
	ids := []uint64{others[0].ID, others[1].ID}
	// Up to 5s (a loaded machine elects slowly), still before any held
	// fsync completes.
	elected := waitForEvery(5*time.Second, 10*time.Millisecond, func() bool {
		for _, n := range others {
			if s, err := c.StreamStatus(n.ID, stream); err == nil && slices.Contains(ids, s.Leader) {
				return true
			}
		}
		return false
	})
	t.Logf("new leader elected before the power loss: %v", elected)
	c.powerLossOf(others...)
	found := c.restartAndCheck(others...)
	c.Restart(leader.ID)
	return found
}

// powerLossAfterMembership: a server is removed; a remaining one loses
// power and must restart with the membership it had applied.
func powerLossAfterMembership(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	leader := c.waitLeader(30 * time.Second)
	gone := c.followers(leader)[0]
	req, err := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s/streams/%s/members/%d", leader.AdminBase, stream, gone.ID), nil)
	require.NoError(t, err)
	resp, err := leader.AdminClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var stay []*node
	for _, n := range c.Nodes {
		if n != gone {
			stay = append(stay, n)
		}
	}
	require.True(t, waitFor(10*time.Second, func() bool {
		for _, n := range stay {
			if s, err := c.StreamStatus(n.ID, stream); err != nil || slices.Contains(s.Voters, gone.ID) {
				return false
			}
		}
		return true
	}), "the removal did not apply")
	// Let the change be written (it is durable once applied on disk).
	cl := c.client(leader)
	defer cl.Close()
	for range 5 {
		_ = produce(cl, "after the change")
	}
	victim := c.followers(leader)[1]
	c.powerLossOf(victim)
	return c.restartAndCheck(victim)
}

// fetch fetches stream from offset at addr, not waiting for data.
func fetch(t *testing.T, addr string, offset int64, timeout time.Duration) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	tp := kmsg.NewFetchRequestTopic()
	tp.Topic = stream
	p := kmsg.NewFetchRequestTopicPartition()
	p.FetchOffset = offset
	p.PartitionMaxBytes = 1 << 20
	p.CurrentLeaderEpoch = -1
	p.LogStartOffset = -1
	tp.Partitions = append(tp.Partitions, p)
	req.Topics = append(req.Topics, tp)
	resp := kmsg.NewPtrFetchResponse()
	if err := proccluster.RoundTrip(addr, req, resp, timeout); err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch response with %d topics (error code %d)", len(resp.Topics), resp.ErrorCode)
	}
	return &resp.Topics[0].Partitions[0], nil
}

// fetchFromFollower: a follower must refuse a fetch (NOT_LEADER_OR_FOLLOWER):
// its log may be behind the leader's high watermark.
func fetchFromFollower(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	leader := c.waitLeader(30 * time.Second)
	var found []string
	for _, n := range c.followers(leader) {
		p, err := fetch(t, n.Kafka, 0, 10*time.Second)
		require.NoError(t, err)
		if p.ErrorCode != 6 {
			found = append(found, fmt.Sprintf("follower %d answered a fetch (error code %d, high watermark %d)", n.ID, p.ErrorCode, p.HighWatermark))
		}
	}
	return found
}

// fetchUncommitted: the followers hold up their appends, so a record stays
// uncommitted on the leader; a fetch must not see it.
func fetchUncommitted(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	leader := c.waitLeader(30 * time.Second)
	end := c.mustStatus(leader).EndOffset
	for _, n := range c.followers(leader) {
		c.enable(n, "raftnode/beforeSave", "sleep(3000)")
	}
	cl := c.client(leader)
	defer cl.Close()
	go func() { _ = produce(cl, "uncommitted") }()
	require.True(t, waitFor(5*time.Second, func() bool { return c.mustStatus(leader).EndOffset > end }), "the record never reached the leader's log")
	p, err := fetch(t, leader.Kafka, end, 10*time.Second)
	require.NoError(t, err)
	if p.ErrorCode == 0 && p.HighWatermark > end {
		return []string{fmt.Sprintf("a fetch at %d saw high watermark %d with the record at %d not committed (%d bytes of records)",
			end, p.HighWatermark, end, len(p.RecordBatches))}
	}
	return nil
}

// fetchFromDeposedLeader: the leader is cut off from its peers (not from
// clients) and its clock runs slow, so it believes it leads for seconds
// after the others elected a new leader, which acknowledges a write. A
// fetch the old leader answers must not miss that write: without a read
// fence (a quorum confirming its leadership), it serves a stale high
// watermark.
func fetchFromDeposedLeader(t *testing.T, env []string) []string {
	c := startEnv(t, env)
	old := c.waitLeader(30 * time.Second)
	c.enable(old, "raftnode/beforeTick", "sleep(300)")
	others := c.followers(old)
	for _, n := range others {
		c.enable(n, "raftnode/dropTo", fmt.Sprintf("return(%d)", old.ID))
		c.enable(n, "raftnode/dropFrom", fmt.Sprintf("return(%d)", old.ID))
	}
	var nw uint64
	require.True(t, waitFor(20*time.Second, func() bool {
		s, err := c.StreamStatus(others[0].ID, stream)
		if err == nil && s.Leader != 0 && s.Leader != old.ID {
			nw = s.Leader
		}
		return nw != 0
	}), "the others elected no new leader")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Node(nw).Kafka), kgo.DefaultProduceTopic(stream), kgo.RecordRetries(3))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("after the election")}).First()
	require.NoError(t, err, "produce to the new leader %d", nw)
	p, err := fetch(t, old.Kafka, 0, 15*time.Second)
	if err != nil {
		t.Logf("the deposed leader did not answer: %v", err)
		return nil
	}
	if p.ErrorCode == 0 && p.HighWatermark <= r.Offset {
		return []string{fmt.Sprintf("deposed leader %d answered a fetch with high watermark %d after offset %d was acknowledged by leader %d",
			old.ID, p.HighWatermark, r.Offset, nw)}
	}
	return nil
}

// TestFailpointPowerLoss: a failpoint's return("powerloss") cuts the power
// at its marker: the follower dies with a chunk written and not synced,
// loses it, and catches up; nothing acknowledged is lost.
func TestFailpointPowerLoss(t *testing.T) {
	c := startEnv(t, nil)
	leader := c.waitLeader(30 * time.Second)
	victim := c.followers(leader)[0]
	c.enable(victim, "storage/afterWrite", `1*return("powerloss")`)
	l := &ledger{}
	cl := c.client(leader)
	defer cl.Close()
	c.produceN(l, cl, "before", 20, 100)
	c.waitCrash(victim, 10*time.Second) // SIGKILL, after the power cut
	require.Contains(t, proccluster.Tail(victim.LogPath, 20), "vdl failpoint: power loss")
	c.Restart(victim.ID)
	c.produceN(l, cl, "after", 20, 100)
	c.checkNoAckedLoss(l)
}
