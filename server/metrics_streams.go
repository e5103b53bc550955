package server

import (
	"maps"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
)

// streamCollector reports each hosted stream's storage counters
// (storage.Log.Stats), its proposals in flight, and on its leader each
// follower's lag and whether the leader is outside the stream's preferred
// DC. Read at scrape time: nothing on the hot path but the counters.
type streamCollector struct {
	s                                         *Server
	written, hits, misses, diskRead, segments *prometheus.Desc
	pending, followerLag, outsidePreferred    *prometheus.Desc
	bytesIn, recordsIn, bytesOut, recordsOut  *prometheus.Desc
}

func newStreamCollector(s *Server) *streamCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"stream"}, labels...), nil)
	}
	return &streamCollector{s: s,
		written:  d("vdl_storage_written_bytes_total", "Record bytes this server wrote to the stream's segment files."),
		hits:     d("vdl_storage_tail_cache_hits_total", "Reads of the stream served from the tail cache (memory)."),
		misses:   d("vdl_storage_tail_cache_misses_total", "Reads of the stream that went to its segment files (catch-up)."),
		diskRead: d("vdl_storage_catchup_read_bytes_total", "Bytes read from the stream's segment files for reads (read-ahead included)."),
		segments: d("vdl_storage_segments", "Segment files of the stream on this server, the active one included."),
		pending:  d("vdl_raft_pending_proposals", "Proposals of the stream's group submitted and not yet completed on this server."),
		followerLag: d("vdl_raft_follower_lag_entries",
			"On the stream's leader: Raft entries a replica is behind the commit index.", "peer"),
		outsidePreferred: d("vdl_stream_leader_outside_preferred_dc",
			"On the stream's leader: 1 if it is outside the stream's preferred DC (the balancer moves it back)."),
		bytesIn:    d("vdl_stream_produced_bytes_total", "Bytes of record batches produced and committed, by stream (on its leader)."),
		recordsIn:  d("vdl_stream_produced_records_total", "Records produced and committed, by stream (on its leader)."),
		bytesOut:   d("vdl_stream_fetched_bytes_total", "Bytes of record batches read for Fetch responses, by stream."),
		recordsOut: d("vdl_stream_fetched_records_total", "Records (offsets) read for Fetch responses, by stream."),
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.written, c.hits, c.misses, c.diskRead, c.segments, c.pending, c.followerLag, c.outsidePreferred,
		c.bytesIn, c.recordsIn, c.bytesOut, c.recordsOut} {
		ch <- d
	}
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	hosted := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		hosted = append(hosted, st)
	}
	s.mu.Unlock()
	groups := map[uint64]raftnode.GroupStatus{} // one trip to the Raft loop, not one per stream
	for _, gs := range s.host.Statuses() {
		groups[gs.Group] = gs
	}
	for _, st := range hosted {
		name := st.cfg.Name
		stats := st.log.Stats()
		ch <- prometheus.MustNewConstMetric(c.written, prometheus.CounterValue, float64(stats.BytesWritten), name)
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(stats.CacheHits), name)
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(stats.CacheMisses), name)
		ch <- prometheus.MustNewConstMetric(c.diskRead, prometheus.CounterValue, float64(stats.DiskReadBytes), name)
		ch <- prometheus.MustNewConstMetric(c.segments, prometheus.GaugeValue, float64(stats.Segments), name)
		if t := st.traffic; t != nil {
			ch <- prometheus.MustNewConstMetric(c.bytesIn, prometheus.CounterValue, float64(t.bytesIn.Load()), name)
			ch <- prometheus.MustNewConstMetric(c.recordsIn, prometheus.CounterValue, float64(t.recordsIn.Load()), name)
			ch <- prometheus.MustNewConstMetric(c.bytesOut, prometheus.CounterValue, float64(t.bytesOut.Load()), name)
			ch <- prometheus.MustNewConstMetric(c.recordsOut, prometheus.CounterValue, float64(t.recordsOut.Load()), name)
		}
		gs, ok := groups[st.cfg.ID]
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(gs.Pending), name)
		if gs.Role != leaderRole {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(gs.Progress)) {
			if id == s.cfg.NodeID {
				continue
			}
			lag := uint64(0)
			if p := gs.Progress[id]; gs.Commit > p.Match {
				lag = gs.Commit - p.Match
			}
			ch <- prometheus.MustNewConstMetric(c.followerLag, prometheus.GaugeValue, float64(lag), name, strconv.FormatUint(id, 10))
		}
		dc := s.preferredDC(st)
		ch <- prometheus.MustNewConstMetric(c.outsidePreferred, prometheus.GaugeValue, b2f(dc != "" && dc != s.cfg.DC), name)
	}
}

// preferredDC is the stream's preferred DC: its own config's (preferred.dc,
// set with IncrementalAlterConfigs), else the config servers' or the
// static configuration's.
func (s *Server) preferredDC(st *stream) string {
	if dc := st.log.Config()[kafka.ConfigPreferredDC]; dc != "" {
		return dc
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.cfg.PreferredDC
}
