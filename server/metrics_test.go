package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// TestMetricsAndProfiles produces and consumes through a real cluster
// (three servers in one process: each has its own registry) and checks
// that the leader's /metrics moved, that promtool accepts it, and that the
// profiles need the admin credentials.
func TestMetricsAndProfiles(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	l := c.leader()
	const n = 200
	produceValues(t, c.brokers(), "m", n)
	consumeN(t, c.brokers(), n)

	body := c.adminGet(t, l, false, "/metrics", http.StatusOK)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	get := func(name string, labels ...string) *dto.Metric {
		t.Helper()
		m := findMetric(fams, name, labels...)
		require.NotNil(t, m, "%s %v in\n%s", name, labels, body)
		return m
	}

	require.Positive(t, get("vdl_kafka_requests_total", "api", "Produce").GetCounter().GetValue())
	require.Positive(t, get("vdl_kafka_requests_total", "api", "Fetch").GetCounter().GetValue())
	total := get("vdl_kafka_request_duration_seconds", "api", "Produce").GetHistogram()
	require.Positive(t, total.GetSampleCount())
	var stages float64
	for _, stage := range stageNames {
		h := get("vdl_kafka_request_stage_duration_seconds", "api", "Produce", "stage", stage).GetHistogram()
		require.Equal(t, total.GetSampleCount(), h.GetSampleCount(), stage)
		stages += h.GetSampleSum()
		t.Logf("Produce %s: mean %.3f ms", stage, 1e3*h.GetSampleSum()/float64(h.GetSampleCount()))
	}
	require.InDelta(t, total.GetSampleSum(), stages, 1e-6+total.GetSampleSum()*1e-9, "the stages add up to the total")
	remote := get("vdl_kafka_request_stage_duration_seconds", "api", "Produce", "stage", "remote").GetHistogram().GetSampleSum()
	require.Positive(t, remote, "a produce waits for its commit")

	require.Equal(t, float64(n), get("vdl_stream_produced_records_total", "stream", "s").GetCounter().GetValue())
	require.Greater(t, get("vdl_stream_produced_bytes_total", "stream", "s").GetCounter().GetValue(), float64(200*n))
	require.GreaterOrEqual(t, get("vdl_stream_fetched_records_total", "stream", "s").GetCounter().GetValue(), float64(n))
	require.Positive(t, get("vdl_stream_fetched_bytes_total", "stream", "s").GetCounter().GetValue())
	require.Positive(t, get("vdl_storage_fsync_duration_seconds").GetHistogram().GetSampleCount())
	require.Positive(t, get("vdl_storage_write_duration_seconds").GetHistogram().GetSampleCount())
	require.NotNil(t, get("vdl_kafka_connections", "listener", "plain").GetGauge())

	require.Equal(t, 1.0, get("vdl_raft_is_leader", "stream", "s").GetGauge().GetValue())
	require.Equal(t, 0.0, get("vdl_raft_leaderless", "stream", "s").GetGauge().GetValue())
	require.Equal(t, 0.0, get("vdl_raft_campaigning", "stream", "s").GetGauge().GetValue())
	require.GreaterOrEqual(t, get("vdl_raft_leader_changes_total", "stream", "s").GetCounter().GetValue(), 1.0)
	require.Positive(t, get("vdl_raft_term", "stream", "s").GetGauge().GetValue())
	require.Equal(t, float64(n), get("vdl_stream_high_watermark", "stream", "s").GetGauge().GetValue())
	require.Equal(t, 0.0, get("vdl_stream_log_start_offset", "stream", "s").GetGauge().GetValue())
	require.Equal(t, 0.0, get("vdl_server_fail_stopped").GetGauge().GetValue())
	require.Equal(t, float64(raftnode.DefaultMaxCampaigns), get("vdl_raft_campaign_bound").GetGauge().GetValue(), "no election timed out")
	commit := get("vdl_raft_commit_index", "stream", "s").GetGauge().GetValue()
	require.Positive(t, commit)
	require.LessOrEqual(t, get("vdl_raft_applied_index", "stream", "s").GetGauge().GetValue(), commit)

	require.Positive(t, get("vdl_raft_commit_duration_seconds").GetHistogram().GetSampleCount())
	require.Positive(t, get("vdl_storage_written_bytes_total", "stream", "s").GetCounter().GetValue())
	require.Positive(t, get("vdl_storage_tail_cache_hits_total", "stream", "s").GetCounter().GetValue(), "the consumer read the tail")
	require.NotNil(t, get("vdl_storage_tail_cache_misses_total", "stream", "s").GetCounter())
	require.NotNil(t, get("vdl_storage_catchup_read_bytes_total", "stream", "s").GetCounter())
	require.Zero(t, get("vdl_storage_catchup_read_waits_total").GetCounter().GetValue(), "no catch-up read")
	require.Zero(t, get("vdl_storage_catchup_read_waiting").GetGauge().GetValue())
	require.Zero(t, get("vdl_storage_catchup_read_pace_bytes_per_second").GetGauge().GetValue(), "not paced")
	require.GreaterOrEqual(t, get("vdl_storage_segments", "stream", "s").GetGauge().GetValue(), 1.0)
	require.Equal(t, 0.0, get("vdl_raft_pending_proposals", "stream", "s").GetGauge().GetValue())
	for _, peer := range []string{"1", "2", "3"} {
		if peer == fmt.Sprint(c.cfgs[l].NodeID) {
			continue
		}
		require.NotNil(t, get("vdl_raft_follower_lag_entries", "stream", "s", "peer", peer).GetGauge())
		require.Positive(t, get("vdl_raft_append_round_trip_seconds", "peer", peer).GetHistogram().GetSampleCount(),
			"the leader timed its appends to follower %s", peer)
	}
	follower := (l + 1) % len(c.cfgs)
	fbody := c.adminGet(t, follower, false, "/metrics", http.StatusOK)
	fparser := expfmt.NewTextParser(model.UTF8Validation)
	ffams, err := fparser.TextToMetricFamilies(bytes.NewReader(fbody))
	require.NoError(t, err)
	durable := findMetric(ffams, "vdl_raft_append_durable_seconds")
	require.NotNil(t, durable, "in\n%s", fbody)
	require.Positive(t, durable.GetHistogram().GetSampleCount(), "the follower timed the leader's appends")
	require.Equal(t, 0.0, get("vdl_stream_leader_outside_preferred_dc", "stream", "s").GetGauge().GetValue(), "no preferred DC")
	require.NotNil(t, get("vdl_raft_snapshot_installs_total", "result", "ok").GetCounter())
	require.Positive(t, get("go_sched_latencies_seconds").GetHistogram().GetSampleCount(), "the scheduler's latencies")
	require.NotNil(t, get("go_sched_pauses_total_gc_seconds").GetHistogram(), "the collector's pauses")

	t.Run("promtool", func(t *testing.T) { promtoolCheck(t, body) })

	t.Run("pprof needs the admin credentials", func(t *testing.T) {
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug//pprof/heap"} {
			c.adminGet(t, l, false, p, http.StatusUnauthorized)
		}
		require.Contains(t, string(c.adminGet(t, l, true, "/debug/pprof/", http.StatusOK)), "heap")
		c.adminGet(t, l, true, "/debug/pprof/heap?debug=1", http.StatusOK)
		c.adminGet(t, l, false, "/status", http.StatusOK) // the other reads stay open
	})
}

// adminGet GETs path from node i's admin API (with the admin token or
// nothing) and checks the status.
func (c *testCluster) adminGet(t *testing.T, i int, token bool, path string, want int) []byte {
	t.Helper()
	resp, err := c.adminClient(token, "").Get("https://" + c.cfgs[i].AdminListen + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "GET %s: %s", path, b)
	return b
}

func consumeN(t *testing.T, brokers []string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("s"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	pollN(t, context.Background(), cl, n)
}

// pollN polls cl until it read n records (30 s at most).
func pollN(t *testing.T, ctx context.Context, cl *kgo.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d", got, n)
		got += fs.NumRecords()
	}
}

// findMetric returns the series of family name with the given label pairs.
func findMetric(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f, ok := fams[name]
	if !ok {
		return nil
	}
	for _, m := range f.GetMetric() {
		if hasLabels(m, labels) {
			return m
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			found = found || (lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

// promtoolCheck runs `promtool check metrics` (Prometheus's linter of
// names, units, help and types) on a scrape.
func promtoolCheck(t *testing.T, scrape []byte) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}

// TestMetricsDocumented: every vdl_ metric has a row in docs/operations.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	m := newMetrics()
	m.watchReadBudget(storage.NewReadBudget(0, 0, true))
	fams, err := m.reg.Gather()
	require.NoError(t, err)
	names := []string{"vdl_server_fail_stopped", "vdl_raft_campaign_bound"}
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	for _, g := range raftGauges {
		names = append(names, g.name)
	}
	names = append(names, groupSeries...)
	desc := make(chan *prometheus.Desc, 16)
	newStreamCollector(nil).Describe(desc)
	close(desc)
	for d := range desc {
		names = append(names, descName(d))
	}
	for _, name := range names {
		if strings.HasPrefix(name, "vdl_") {
			require.Contains(t, string(doc), "`"+name+"`", "docs/operations.md, Monitoring")
		}
	}
}

// BenchmarkRequestDone: the metrics cost of one Kafka request.
func BenchmarkRequestDone(b *testing.B) {
	m := newMetrics()
	t := kafka.RequestTiming{Key: 0, Read: 1, Dequeued: 2000, Local: 30000, Completed: 1500000, Taken: 1501000, Sent: 1510000}
	b.ReportAllocs()
	for b.Loop() {
		m.RequestDone(&t)
	}
}

// The coordinator reports each consumer group's committed offset, lag and
// members; the other servers report no group.
func TestConsumerGroupMetrics(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	const n = 100
	produceValues(t, c.brokers(), "g", n)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.ConsumerGroup("metrics-group"), kgo.ConsumeTopics("s"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pollN(t, ctx, cl, n)
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var reporting []int
		for i := range c.servers {
			body := c.adminGet(t, i, false, "/metrics", http.StatusOK)
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
			if !assert.NoError(ct, err) {
				return
			}
			m := findMetric(fams, "vdl_consumer_group_committed_offset", "group", "metrics-group", "stream", "s")
			if m == nil {
				continue
			}
			reporting = append(reporting, i)
			assert.Equal(ct, float64(n), m.GetGauge().GetValue(), "committed offset")
			lag := findMetric(fams, "vdl_consumer_group_lag", "group", "metrics-group", "stream", "s")
			if assert.NotNil(ct, lag) {
				assert.Zero(ct, lag.GetGauge().GetValue(), "everything consumed and committed")
			}
			members := findMetric(fams, "vdl_consumer_group_members", "group", "metrics-group")
			if assert.NotNil(ct, members) {
				assert.Equal(ct, 1.0, members.GetGauge().GetValue())
			}
		}
		assert.Len(ct, reporting, 1, "only the coordinator reports the group")
	}, 10*time.Second, 100*time.Millisecond)
}

// descName is a Desc's metric name (Desc has no accessor).
func descName(d *prometheus.Desc) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
