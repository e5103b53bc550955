package server

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

type epochHook struct{ n atomic.Int32 }

func (h *epochHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == kmsg.OffsetForLeaderEpoch.Int16() {
		h.n.Add(1)
	}
}

// Leader epochs on a real cluster: the records a consumer reads carry the
// Raft term they were written in; when the leader is stopped the consumer
// sees the new leader's epoch in Metadata, validates its position with
// OffsetForLeaderEpoch (the new leader answers from its log's terms: the
// old epoch ends at or past the position, nothing was truncated) and goes
// on with no record lost or read twice.
func TestLeaderEpochsAcrossLeaderChange(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 50)
	first := c.leader()
	term1, _ := c.servers[first].Host().View(1)

	hook := &epochHook{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.ConsumeTopics("s"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(200*time.Millisecond),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.WithHooks(hook), kgo.RetryTimeout(30*time.Second))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	epochs := map[int32]int{}
	poll := func(n int) {
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), n)
			fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error (retried): %v", err) })
			fs.EachRecord(func(r *kgo.Record) {
				got = append(got, string(r.Value))
				epochs[r.LeaderEpoch]++
			})
		}
	}
	poll(50)
	require.Equal(t, map[int32]int{batchfmt.EpochOfTerm(term1.Term): 50}, epochs, "records carry the term they were written in")

	c.stop(first)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	term2, _ := c.servers[c.leader()].Host().View(1)
	require.Greater(t, term2.Term, term1.Term)
	var live []string
	for i, cfg := range c.cfgs {
		if i != first {
			live = append(live, cfg.KafkaListen)
		}
	}
	produceValues(t, live, "b", 50)
	poll(100)
	require.Len(t, got, 100, "nothing read twice")
	for i := range 50 {
		require.Contains(t, got[i], fmt.Sprintf("a-%d-", i))
		require.Contains(t, got[50+i], fmt.Sprintf("b-%d-", i))
	}
	require.Equal(t, 50, epochs[batchfmt.EpochOfTerm(term2.Term)])
	require.Positive(t, hook.n.Load(), "the consumer validated its position with OffsetForLeaderEpoch")
}

// A follower's uncommitted suffix truncated after a leader change, with
// real servers and clients: the leader loses both followers and appends
// records it can never commit (their produce fails); it is stopped, the
// followers elect a new leader in a higher term, which commits other
// records at those offsets; the old leader comes back as a follower and
// its suffix is cut and replaced. A franz-go consumer that was reading the
// old leader validates its position with OffsetForLeaderEpoch and goes on
// with exactly the committed records (it never saw the uncommitted ones:
// they were above the high watermark), and kcat (librdkafka) reading from
// the start sees the same.
func TestUncommittedSuffixTruncatedAfterLeaderChange(t *testing.T) {
	c := newTestClusterWith(t, func(cfg *Config) {
		cfg.Storage.SegmentBytes = 64 << 10
		cfg.Raft.ElectionTicks = 100 // 2 s: room to append to a leader that lost its followers
	})
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 20)
	old := c.leader()

	hook := &epochHook{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.ConsumeTopics("s"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(200*time.Millisecond),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.WithHooks(hook), kgo.RetryTimeout(60*time.Second))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var got []string
	poll := func(n int) {
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), n)
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
	}
	poll(20)

	// The leader alone: what it appends now is never committed.
	var followers []int
	for i := range c.servers {
		if i != old {
			followers = append(followers, i)
			c.stop(i)
		}
	}
	lone, err := kgo.NewClient(kgo.SeedBrokers(c.cfgs[old].KafkaListen), kgo.DefaultProduceTopic("s"),
		kgo.DisableIdempotentWrite(), kgo.RecordRetries(0), kgo.RecordDeliveryTimeout(time.Second))
	require.NoError(t, err)
	for i := range 5 {
		lone.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "lost-%d", i)}, func(_ *kgo.Record, err error) {
			require.Error(t, err, "a produce to a leader without a quorum is never acknowledged")
		})
	}
	require.NoError(t, lone.Flush(ctx))
	lone.Close()
	oldLog := c.servers[old].stream1().log
	hwm, _, _ := c.servers[old].Host().HighWatermark(1)
	require.Equal(t, int64(20), hwm)
	require.Greater(t, oldLog.EndOffset(), hwm, "the old leader holds an uncommitted suffix")

	// The followers elect a new leader, which commits other records.
	c.stop(old)
	for _, i := range followers {
		c.start(i)
	}
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 30*time.Second, 20*time.Millisecond)
	var live []string
	for _, i := range followers {
		live = append(live, c.cfgs[i].KafkaListen)
	}
	produceValues(t, live, "b", 20)
	poll(40)

	// The old leader comes back: its suffix is replaced by the new
	// leader's records.
	c.start(old)
	newLeader := c.servers[c.leader()].stream1().log
	require.Eventually(t, func() bool {
		l := c.servers[old].stream1().log
		return l.EndOffset() == newLeader.EndOffset() && l.EndOffset() >= 40
	}, 30*time.Second, 20*time.Millisecond)
	bs, err := c.servers[old].stream1().log.Read(20, 40, 1<<20)
	require.NoError(t, err)
	require.NotContains(t, string(bs[0].Data), "lost-", "the uncommitted suffix was cut")

	require.Len(t, got, 40)
	for i := range 20 {
		require.Contains(t, got[i], fmt.Sprintf("a-%d-", i))
		require.Contains(t, got[20+i], fmt.Sprintf("b-%d-", i))
	}
	require.Positive(t, hook.n.Load(), "the consumer validated its position with OffsetForLeaderEpoch")

	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Log("kcat not installed: skipping the librdkafka reader")
		return
	}
	out, err := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(c.brokers(), ","), "-t", "s", "-o", "beginning", "-e", "-q", "-f", "%s\n").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 40)
	require.NotContains(t, string(out), "lost-")
}
