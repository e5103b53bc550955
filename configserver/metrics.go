package configserver

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// GET /metrics on the config servers' API (read-only, open like every
// read): leadership, the catalog, servers by health, moves, and the
// balancer's counters. Computed at scrape time from the state and the
// leader's soft state; a follower exports what it knows (its catalog, not
// leading).

var (
	descLeader    = prometheus.NewDesc("vdl_configserver_is_leader", "1 on the config servers' leader.", nil, nil)
	descStreams   = prometheus.NewDesc("vdl_configserver_streams", "Streams by state (active, deleting).", []string{"state"}, nil)
	descServers   = prometheus.NewDesc("vdl_configserver_servers", "Registered servers by health (up, down, unknown) as the leader sees them.", []string{"health"}, nil)
	descMoves     = prometheus.NewDesc("vdl_configserver_moves", "Streams' latest replica moves by state (active, done, cancelled).", []string{"state"}, nil)
	descTransfers = prometheus.NewDesc("vdl_configserver_balancer_transfers_total", "Leader transfers the balancer made while this config server led.", nil, nil)
	descFailures  = prometheus.NewDesc("vdl_configserver_balancer_failures_total", "Leader transfers the balancer asked for that failed.", nil, nil)
	descPending   = prometheus.NewDesc("vdl_configserver_balancer_pending", "Streams whose leader is outside their preferred DC, waiting.", nil, nil)
	descRefused   = prometheus.NewDesc("vdl_configserver_balancer_refused", "Streams whose leader is outside their preferred DC with no replica there to take over.", nil, nil)
	descVersion   = prometheus.NewDesc("vdl_configserver_catalog_version", "The offset of the last change of servers or streams.", nil, nil)
)

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descStreams, descServers, descMoves, descTransfers, descFailures, descPending, descRefused, descVersion} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	leader := 0.0
	if s.isLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(s.state.Version()))
	streams := map[string]float64{StreamActive: 0, StreamDeleting: 0}
	for _, st := range s.state.Streams() {
		streams[st.State]++
	}
	for state, n := range streams {
		ch <- prometheus.MustNewConstMetric(descStreams, prometheus.GaugeValue, n, state)
	}
	health := map[string]float64{"up": 0, "down": 0, "unknown": 0}
	for _, ss := range s.serverStatuses(time.Now()) {
		health[ss.Health]++
	}
	for h, n := range health {
		ch <- prometheus.MustNewConstMetric(descServers, prometheus.GaugeValue, n, h)
	}
	moves := map[string]float64{MoveActive: 0, MoveDone: 0, MoveCancelled: 0}
	for _, m := range s.state.Moves() {
		moves[m.State]++
	}
	for state, n := range moves {
		ch <- prometheus.MustNewConstMetric(descMoves, prometheus.GaugeValue, n, state)
	}
	b := s.bal.status()
	ch <- prometheus.MustNewConstMetric(descTransfers, prometheus.CounterValue, float64(b.Transfers))
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(b.Failures))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(len(b.Pending)))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.GaugeValue, float64(len(b.Refused)))
}

func (s *Service) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
