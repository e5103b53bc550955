package server

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.etcd.io/raft/v3"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/storage"
)

// metrics are one server's Prometheus metrics (GET /metrics on the admin
// listener; the list with meanings is in docs/operations.md, Monitoring).
// Each server has a registry of its own, not the global one, so several
// servers can run in one process (tests). Hot paths use children resolved
// when the server starts: an array by API key, a struct per stream.
type metrics struct {
	reg *prometheus.Registry

	requests    [maxAPIKey + 1]prometheus.Counter
	duration    [maxAPIKey + 1]prometheus.Observer
	stages      [maxAPIKey + 1][len(stageNames)]prometheus.Observer
	connections *prometheus.GaugeVec

	writeSeconds, syncSeconds, commitSeconds prometheus.Histogram
	appendDurable                            prometheus.Histogram
	appendRoundTrip                          *prometheus.HistogramVec
	installs                                 *prometheus.CounterVec
}

// maxAPIKey bounds the keys of the APIs VDL serves (DescribeCluster, 60).
const maxAPIKey = 60

// stageNames are the stages of Kafka's RequestMetrics (kafka.RequestTiming).
var stageNames = [...]string{"queue", "local", "remote", "response_queue", "send"}

// latencyBuckets: 100 µs to ~13 s, doubling — a local produce takes well
// under a millisecond, a long-poll fetch up to its MaxWait.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg}
	requests := f.counterVec("vdl_kafka_requests_total", "Kafka requests answered (or decided, without a response), by API.", "api")
	duration := f.histogramVec("vdl_kafka_request_duration_seconds", "Kafka request latency from read to written, by API.", "api")
	stages := f.histogramVec("vdl_kafka_request_stage_duration_seconds",
		"Kafka request latency by stage (Kafka's RequestMetrics: queue, local, remote, response_queue, send), by API.", "api", "stage")
	for _, key := range kafka.ServedKeys() {
		api := kmsg.NameForKey(key)
		m.requests[key] = requests.WithLabelValues(api)
		m.duration[key] = duration.WithLabelValues(api)
		for i, stage := range stageNames {
			m.stages[key][i] = stages.WithLabelValues(api, stage)
		}
	}
	m.connections = f.gaugeVec("vdl_kafka_connections", "Open Kafka client connections, by listener (plain, tls).", "listener")
	for _, l := range []string{"plain", "tls"} {
		m.connections.WithLabelValues(l)
	}
	m.writeSeconds = f.histogram("vdl_storage_write_duration_seconds", "Time of one write job: appends to every log with new entries.")
	m.syncSeconds = f.histogram("vdl_storage_fsync_duration_seconds", "Time of one sync job: one fdatasync per log written.")
	m.commitSeconds = f.histogram("vdl_raft_commit_duration_seconds",
		"Time from a proposal's submission to its completion on this server (replicated to a quorum, durable, applied).")
	// A commit is a leader's append reaching a follower and made durable
	// there: these two tell a slow peer or wire from a slow disk.
	m.appendRoundTrip = f.histogramVec("vdl_raft_append_round_trip_seconds",
		"Time from an append this server, leading, sends to a follower to that follower's answer (the wire both ways, the follower's write and fdatasync), by follower.", "peer")
	m.appendDurable = f.histogram("vdl_raft_append_durable_seconds",
		"Time from an append's arrival from the leader to this server's answer acknowledging it (stepped, written and synced here).")
	m.installs = f.counterVec("vdl_raft_snapshot_installs_total", "Snapshot installs (catch-up from the leader's segments) by result.", "result")
	for _, r := range []string{"ok", "failed"} {
		m.installs.WithLabelValues(r)
	}
	// The scheduler's metrics beside the defaults: how long runnable
	// goroutines waited for a CPU (go_sched_latencies_seconds) tells a
	// server short of CPU, whose every latency grows, from a slow disk;
	// and the collector's stop-the-world pauses.
	m.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchReadBudget exports the state of the server's catch-up read budget.
func (m *metrics) watchReadBudget(b *storage.ReadBudget) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vdl_storage_catchup_read_waits_total",
			Help: "Catch-up disk reads that waited for the read budget (bytes in flight, or paced)."},
			func() float64 { return float64(b.Waits()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vdl_storage_catchup_read_waiting",
			Help: "Catch-up disk reads waiting for the read budget now."},
			func() float64 { return float64(b.Waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vdl_storage_catchup_read_pace_bytes_per_second",
			Help: "The rate catch-up disk reads are paced to now: catchup_read_bytes_per_sec, or less while they yield to writes; 0: not paced."},
			func() float64 { return float64(b.Pace()) }))
}

// factory registers metrics on a registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	f.reg.MustRegister(h)
	return h
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RequestDone counts a Kafka request and its latencies (kafka.Observer).
func (m *metrics) RequestDone(t *kafka.RequestTiming) {
	if t.Key < 0 || t.Key > maxAPIKey || m.requests[t.Key] == nil {
		return
	}
	m.requests[t.Key].Inc()
	m.duration[t.Key].Observe(seconds(t.Total()))
	st := &m.stages[t.Key]
	for i, d := range [len(stageNames)]int64{t.Queue(), t.LocalTime(), t.Remote(), t.ResponseQueue(), t.Send()} {
		st[i].Observe(seconds(d))
	}
}

// Connections tracks open Kafka connections (kafka.Observer).
func (m *metrics) Connections(listener string, delta int) {
	m.connections.WithLabelValues(listener).Add(float64(delta))
}

func seconds(ns int64) float64 { return time.Duration(ns).Seconds() }

// streamTraffic is one stream's traffic counters, read at scrape time by
// streamCollector (nil-safe: the simulator's catalog has none). Plain
// atomics rather than a labelled child of a CounterVec per stream: those
// were 1.5 KiB of pointer-rich heap per stream, which the collector marks
// at every cycle (at 10,000 streams, a fifth of an idle stream's state).
type streamTraffic struct {
	bytesIn, recordsIn, bytesOut, recordsOut atomic.Uint64
}

func (t *streamTraffic) produced(r kafka.Records) {
	if t != nil {
		t.bytesIn.Add(uint64(len(r.Batches)))
		t.recordsIn.Add(uint64(r.Offsets))
	}
}

func (t *streamTraffic) fetched(bytes int, records int64) {
	if t != nil {
		t.bytesOut.Add(uint64(bytes))
		t.recordsOut.Add(uint64(records))
	}
}

// raftCollector reports each hosted stream's Raft and log state, read at
// scrape time (Server.Status): nothing on the hot path.
type raftCollector struct {
	s     *Server
	descs []*prometheus.Desc
}

// raftGauges are the per-stream series: name, help, and how to read them.
// leaderRole is GroupStatus.Role on the leader.
var leaderRole = raft.StateLeader.String()

// preCandidateRole and candidateRole are GroupStatus.Role during an election.
var preCandidateRole, candidateRole = raft.StatePreCandidate.String(), raft.StateCandidate.String()

var raftGauges = []struct {
	name, help string
	counter    bool
	value      func(StreamStatus) float64
}{
	{"vdl_raft_term", "Current Raft term of the stream's group.", false, func(s StreamStatus) float64 { return float64(s.Term) }},
	{"vdl_raft_leader_changes_total", "Changes of the known leader (to none included) since the group started on this server.", true,
		func(s StreamStatus) float64 { return float64(s.LeaderChanges) }},
	{"vdl_raft_is_leader", "1 if this server leads the stream's group.", false, func(s StreamStatus) float64 { return b2f(s.Role == leaderRole) }},
	{"vdl_raft_leaderless", "1 if this server knows no leader of the stream's group.", false, func(s StreamStatus) float64 { return b2f(s.Leader == 0) }},
	{"vdl_raft_campaigning", "1 while this server runs an election in the stream's group (a pre-candidate or candidate).", false,
		func(s StreamStatus) float64 { return b2f(s.Role == preCandidateRole || s.Role == candidateRole) }},
	{"vdl_raft_under_replicated", "1 if this server leads the stream and a voter is not in sync (Kafka's UnderReplicatedPartitions).", false,
		func(s StreamStatus) float64 { return b2f(s.Role == leaderRole && len(s.InSync) < len(s.Voters)) }},
	{"vdl_raft_commit_index", "Raft commit index of the stream's group.", false, func(s StreamStatus) float64 { return float64(s.Commit) }},
	{"vdl_raft_applied_index", "Raft index applied on this server.", false, func(s StreamStatus) float64 { return float64(s.Applied) }},
	{"vdl_raft_uncommitted_bytes", "Bytes proposed and not yet committed (produces fail fast beyond max_uncommitted_bytes).", false,
		func(s StreamStatus) float64 { return float64(s.Uncommitted) }},
	{"vdl_stream_high_watermark", "High watermark: the offset after the last committed record.", false,
		func(s StreamStatus) float64 { return float64(s.HighWatermark) }},
	{"vdl_stream_log_start_offset", "First offset kept (retention moves it).", false, func(s StreamStatus) float64 { return float64(s.StartOffset) }},
	{"vdl_stream_log_end_offset", "Offset after the last record in this server's log, committed or not.", false,
		func(s StreamStatus) float64 { return float64(s.EndOffset) }},
}

func newRaftCollector(s *Server) *raftCollector {
	c := &raftCollector{s: s}
	for _, g := range raftGauges {
		c.descs = append(c.descs, prometheus.NewDesc(g.name, g.help, []string{"stream"}, nil))
	}
	c.descs = append(c.descs, prometheus.NewDesc("vdl_server_fail_stopped", "1 once the server fail-stopped (it exits; /health answers 503).", nil, nil),
		prometheus.NewDesc("vdl_raft_campaign_bound", "Elections this server may start at once now: max_campaigns, "+
			"halved while elections time out and grown back by their wins (-1: unbounded).", nil, nil))
	return c
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.s.Status().Streams {
		for i, g := range raftGauges {
			kind := prometheus.GaugeValue
			if g.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(c.descs[i], kind, g.value(st), st.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.descs[len(raftGauges)], prometheus.GaugeValue, b2f(c.s.host.Err() != nil))
	ch <- prometheus.MustNewConstMetric(c.descs[len(raftGauges)+1], prometheus.GaugeValue, float64(c.s.host.CampaignBound()))
}

// groupCollector reports the consumer groups from the coordinator (the
// leader of __consumer_offsets; elsewhere nothing), read at scrape time.
type groupCollector struct {
	s                      *Server
	lag, committed, member *prometheus.Desc
}

// groupSeries are the consumer-group series (docs/operations.md).
var groupSeries = []string{"vdl_consumer_group_lag", "vdl_consumer_group_committed_offset", "vdl_consumer_group_members"}

func newGroupCollector(s *Server) *groupCollector {
	return &groupCollector{s: s,
		lag: prometheus.NewDesc(groupSeries[0], "Records between a group's committed offset and the stream's high watermark (on the coordinator).",
			[]string{"group", "stream"}, nil),
		committed: prometheus.NewDesc(groupSeries[1], "A group's committed offset in a stream (on the coordinator).", []string{"group", "stream"}, nil),
		member:    prometheus.NewDesc(groupSeries[2], "Members of a consumer group (on the coordinator).", []string{"group"}, nil),
	}
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.committed
	ch <- c.member
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.s.groupsStatus()
	if !ok || !st.Coordinator {
		return
	}
	for _, g := range st.Groups {
		ch <- prometheus.MustNewConstMetric(c.member, prometheus.GaugeValue, float64(len(g.Members)), g.Group)
		for _, o := range g.Offsets {
			ch <- prometheus.MustNewConstMetric(c.committed, prometheus.GaugeValue, float64(o.Offset), g.Group, o.Topic)
			if o.Lag >= 0 {
				ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(o.Lag), g.Group, o.Topic)
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
