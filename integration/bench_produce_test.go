package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/diskprobe"
	"github.com/vdl-project/vdl/internal/proccluster"
	"github.com/vdl-project/vdl/internal/selfcpu"
)

// BenchmarkProduceDefaults: produce on the default server config (no
// tail_cache_bytes or other override; tick_ms 100, the server's default)
// with franz-go's default producer (SeedBrokers and DefaultProduceTopic
// only: idempotent, acks=all, snappy, linger 10 ms, 1 MB batches), 1 KiB
// values, beside the disk's limit measured in the same run. The values are
// distinct slices of 16 MiB of random bytes: snappy (the default) finds
// nothing to compress in a batch, as with real incompressible data (the
// same value in every record compresses a 1 MB batch to a few KB).
//
//   - 4 clients as fast as they go for VDL_BENCH_SECONDS (default 15, 5
//     with -short), twice: right after the cluster started (the servers'
//     heaps growing, shown), then the steady run, whose MB/s is set
//     against a third of the three-writer diskprobe aggregate (three
//     replicas share one disk). Target >= 85 %.
//   - One client paced at half of that load (records/s) for 8 s: its
//     produce latency (call -> promise; target p99 <= 10 ms), the produce
//     requests' round trip (kgo's BrokerE2E hook), and the end-to-end
//     latency of each record (produce call -> delivered to a tailing
//     franz-go consumer with default options; one clock, this process).
//   - The disk probe, one and three writers, with the cluster idle.
//
// Run with make bench-e2e (beside the tuned BenchmarkE2E).
func BenchmarkProduceDefaults(b *testing.B) {
	dur := 15 * time.Second
	if testing.Short() {
		dur = 5 * time.Second
	}
	dur = time.Duration(envInt(b, "VDL_BENCH_SECONDS", int(dur/time.Second))) * time.Second
	dir := b.TempDir()
	if d := os.Getenv("VDL_BENCH_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "vdl-bench-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break // one run is the measurement; -benchtime 1x
		}
		runProduceDefaults(b, dir, dur)
	}
}

type satResult struct {
	acked, errs          int64
	faults               int64 // the servers' minor page faults
	secs                 float64
	serverCPU, clientCPU float64
	load                 string
}

func (s satResult) mbps() float64 { return float64(s.acked) * 1024 / mib / s.secs }

func runProduceDefaults(b *testing.B, dir string, dur time.Duration) {
	const stream = "bench"
	c := StartCluster(b, Options{Dir: filepath.Join(dir, "cluster"), Streams: []string{stream},
		TickMillis: 100, LogLevel: "warn"})
	brokers := c.KafkaAddrs()

	// The first run from the cluster's start is not the steady state: the
	// servers' heaps grow to their size (the tail caches fill, and the
	// collector's goal follows what is live), every page of it fresh to
	// the process, which the VM faults in (5 GB in 15 s here); the second
	// run is the measure, the first is shown beside it.
	cold := produceSaturated(b, c, brokers, stream, 4, dur)
	if prof := os.Getenv("VDL_BENCH_PROFILE"); prof != "" {
		// The leader's and a follower's CPU profiles of the steady run
		// (it starts after the clients' warm-up, about a second in).
		l := c.WaitLeader(stream, 20*time.Second)
		go leaderProfile(b, c.Node(l), prof+".saturated.leader", 8)
		go leaderProfile(b, c.Node(l%3+1), prof+".saturated.follower", 8)
	}
	sat := produceSaturated(b, c, brokers, stream, 4, dur)
	rate := int(float64(sat.acked) / sat.secs / 2)
	// The leader's side of the paced run: its Produce request stages and
	// its storage and Raft histograms (VDL_BENCH_PROFILE: its CPU profile).
	leaderID := c.WaitLeader(stream, 20*time.Second)
	leader := c.Node(leaderID)
	names := []string{"vdl_kafka_request_stage_duration_seconds", "vdl_storage_write_duration_seconds",
		"vdl_storage_fsync_duration_seconds", "vdl_raft_commit_duration_seconds", "go_sched_latencies_seconds",
		"vdl_raft_append_round_trip_seconds", "vdl_raft_append_durable_seconds"}
	var h0, h1 [3]map[string]hist
	for k := range h0 {
		h0[k] = scrapeHists(b, c.Node(uint64(k+1)), "", names...)
	}
	if prof := os.Getenv("VDL_BENCH_PROFILE"); prof != "" {
		go leaderProfile(b, leader, prof+".produce", 6)
	}
	pcpu0, pself0, pt0 := c.CPUSeconds(), selfcpu.Used().Seconds(), time.Now()
	paced := pacedEndToEnd(b, brokers, stream, rate, 8*time.Second)
	psecs := time.Since(pt0).Seconds()
	pserver, pclient := (c.CPUSeconds()-pcpu0)/psecs, (selfcpu.Used().Seconds()-pself0)/psecs
	for k := range h1 {
		h1[k] = scrapeHists(b, c.Node(uint64(k+1)), "", names...)
	}
	lh0, lh1 := h0[leaderID-1], h1[leaderID-1]

	raw1, err := diskprobe.Measure(dir, 256<<10, 1, 3*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	raw3, err := diskprobe.Measure(dir, 256<<10, 3, 3*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	limit := raw3 / 3
	mbps := sat.mbps()
	b.ReportMetric(mbps, "produce-MB/s")
	b.ReportMetric(raw3, "raw3writers-MB/s")
	b.ReportMetric(100*mbps/limit, "%-of-raw3/3")
	b.ReportMetric(ms(paced.produce[1]), "paced-p99-ms")
	b.ReportMetric(ms(paced.e2e[1]), "e2e-p99-ms")
	fmt.Printf(`
VDL produce on defaults: 3 vdl processes (default config), franz-go default producer (idempotent,
acks=all, snappy, linger 10 ms), 1 KiB random values (MB = MiB; load average before: %s)

  raw disk, 3 writers at once (diskprobe)    %8.1f MB/s aggregate -> limit /3 = %.1f MB/s
  raw disk, one writer                       %8.1f MB/s (raw/3 = %.1f MB/s, for comparison with earlier runs)
  produce, 4 clients as fast as they go, right after the cluster started, %.1f s (servers' heaps growing)
    throughput                               %8.1f MB/s  %8.0f msgs/s  (%.0f %% of the limit)
    CPU, the servers' page faults            servers %.2f cores; %.1f M minor faults
  produce, 4 clients as fast as they go, the next %.1f s (steady)
    throughput                               %8.1f MB/s  %8.0f msgs/s  (%d acked, %d errors)
    vs 3-writer aggregate / 3                %7.0f %%     target >= 85%%: %s
    CPU during the run                       servers %.2f cores, bench process (clients) %.2f cores; the machine has %d
    the servers' page faults                 %.1f M minor faults
  produce, 1 client paced at half that load: %d msgs/s (%.1f MB/s), %.0f s; a tailing consumer (defaults)
    latency, produce call -> promise         p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms   target p99 <= 10 ms: %s
    produce request round trip (kgo hook)    p50 %6.2f ms  p99 %6.2f ms  (%d requests)
    end to end, produce call -> delivered    p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  (%d records, %.0f msgs/s acked, %d errors)
`, sat.load, raw3, limit, raw1, raw1/3,
		cold.secs, cold.mbps(), float64(cold.acked)/cold.secs, 100*cold.mbps()/limit,
		cold.serverCPU/cold.secs, float64(cold.faults)/1e6,
		sat.secs, mbps, float64(sat.acked)/sat.secs, sat.acked, sat.errs,
		100*mbps/limit, metStr(mbps >= 0.85*limit),
		sat.serverCPU/sat.secs, sat.clientCPU/sat.secs, runtime.NumCPU(), float64(sat.faults)/1e6,
		rate, float64(rate)/1024, paced.secs,
		ms(paced.produce[0]), ms(paced.produce[1]), ms(paced.produce[2]), metStr(paced.produce[1] <= 10*time.Millisecond),
		ms(paced.rtt[0]), ms(paced.rtt[1]), paced.requests,
		ms(paced.e2e[0]), ms(paced.e2e[1]), ms(paced.e2e[2]), paced.delivered, paced.rate, paced.errs)
	fmt.Printf("    CPU during the paced run                 servers %.2f cores, bench process (producer, consumer) %.2f cores\n", pserver, pclient)
	fmt.Printf("    the leader (node %d) during the paced run:\n", leaderID)
	for _, st := range []string{"queue", "local", "remote", "response_queue", "send"} {
		k := `vdl_kafka_request_stage_duration_seconds{api="Produce",stage="` + st + `"}`
		fmt.Printf("      Produce stage %-15s %s\n", st, histDelta(lh0[k], lh1[k]))
	}
	fmt.Printf("      %-38s %s\n", names[3], histDelta(lh0[names[3]], lh1[names[3]]))
	// A commit's two halves (docs/performance.md, "A paced append, stage
	// by stage"): the leader's appends to each follower and back, and each
	// follower's time to make them durable.
	for k := range h0 {
		if id := uint64(k + 1); id != leaderID {
			rt := fmt.Sprintf(`%s{peer="%d"}`, names[5], id)
			fmt.Printf("      append round trip to node %d        %s\n", id, histDelta(lh0[rt], lh1[rt]))
			fmt.Printf("      node %d %-31s %s\n", id, names[6], histDelta(h0[k][names[6]], h1[k][names[6]]))
		}
	}
	for k := range h0 {
		for _, name := range names[1:3] {
			fmt.Printf("      node %d %-31s %s\n", k+1, name, histDelta(h0[k][name], h1[k][name]))
		}
		fmt.Printf("      node %d go scheduler: %s\n", k+1, waitsOver(h0[k][names[4]], h1[k][names[4]]))
	}
}

// waitsOver is the share of the goroutines made runnable between a and z
// (go_sched_latencies_seconds) that waited for a CPU longer than each of
// its bucket bounds from 0.5 ms on: a server short of CPU delays
// everything it does, the commit too.
func waitsOver(a, z hist) string {
	n := z.count - a.count
	if n <= 0 {
		return "-"
	}
	out := ""
	for _, le := range z.bounds() {
		if le < 0.0005 || math.IsInf(le, 1) {
			continue
		}
		out += fmt.Sprintf("waited > %.1f ms: %.3f%%; ", 1000*le, 100*(n-(z.le[le]-a.le[le]))/n)
	}
	return out + fmt.Sprintf("%.0f wake-ups", n)
}

// produceSaturated runs n default franz-go producers as fast as they go
// for d.
func produceSaturated(b *testing.B, c *Cluster, brokers []string, stream string, n int, d time.Duration) satResult {
	values := newValuePool()
	var acked, errs atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	clients := make([]*kgo.Client, n)
	for p := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(stream))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		// Warm up (metadata, producer id, connection): not throughput.
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: values.next()}).FirstErr(); err != nil {
			b.Fatal(err)
		}
		clients[p] = cl
	}
	r := satResult{load: loadAvg()}
	cpu0, self0, faults0 := c.CPUSeconds(), selfcpu.Used().Seconds(), c.MinorFaults()
	start := time.Now()
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				cl.Produce(ctx, &kgo.Record{Value: values.next()}, func(_ *kgo.Record, err error) {
					if err == nil {
						acked.Add(1)
					} else if ctx.Err() == nil {
						errs.Add(1)
					}
				})
			}
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = cl.Flush(fctx)
			fcancel()
		})
	}
	wg.Wait()
	r.secs = time.Since(start).Seconds()
	r.serverCPU, r.clientCPU = c.CPUSeconds()-cpu0, selfcpu.Used().Seconds()-self0
	r.faults = c.MinorFaults() - faults0
	r.acked, r.errs = acked.Load(), errs.Load()
	return r
}

type pacedE2EResult struct {
	produce, rtt, e2e   [3]time.Duration // p50, p99, p99.9 (rtt: p50, p99)
	requests, delivered int
	errs                int64
	secs, rate          float64
}

// produceRTT records the round trip of each produce request (kgo hook).
type produceRTT struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (h *produceRTT) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key != 0 || e.Err() != nil { // 0: Produce
		return
	}
	h.mu.Lock()
	h.lat = append(h.lat, e.DurationE2E())
	h.mu.Unlock()
}

// pacedEndToEnd produces rate records/s of 1 KiB from one default client
// for d while a default consumer tails the stream; each value carries its
// produce call's time.
func pacedEndToEnd(b *testing.B, brokers []string, stream string, rate int, d time.Duration) pacedE2EResult {
	hook := &produceRTT{}
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(stream), kgo.WithHooks(hook))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().AtEnd()}}))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	// The consumer is at the end once it got the warm-up record.
	if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: make([]byte, 1024)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	for len(cons.PollFetches(context.Background()).Records()) == 0 {
	}
	hook.mu.Lock()
	hook.lat = hook.lat[:0]
	hook.mu.Unlock()

	start := time.Now()
	total := int(float64(rate) * d.Seconds())
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	e2e := make([]time.Duration, 0, total)
	done := make(chan struct{})
	cctx, ccancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer ccancel()
	go func() {
		defer close(done)
		for n := 0; n < total && cctx.Err() == nil; {
			fs := cons.PollFetches(cctx)
			now := time.Since(start)
			fs.EachRecord(func(r *kgo.Record) {
				n++
				e2e = append(e2e, now-time.Duration(binary.BigEndian.Uint64(r.Value)))
			})
		}
	}()
	ctx := context.Background()
	values := newValuePool()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; sent < due; sent++ {
			v := append([]byte(nil), values.next()...)
			t0 := time.Since(start)
			binary.BigEndian.PutUint64(v, uint64(t0))
			prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				dd := time.Since(start) - t0
				if err != nil {
					errs.Add(1)
					return
				}
				mu.Lock()
				lat = append(lat, dd)
				mu.Unlock()
			})
		}
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	<-done
	mu.Lock()
	defer mu.Unlock()
	hook.mu.Lock()
	defer hook.mu.Unlock()
	r := pacedE2EResult{produce: percentiles(lat), rtt: percentiles(hook.lat), e2e: percentiles(e2e),
		requests: len(hook.lat), delivered: len(e2e), errs: errs.Load(), secs: d.Seconds(), rate: float64(len(lat)) / secs}
	if len(e2e) < total {
		b.Logf("the tailing consumer got %d of %d records", len(e2e), total)
	}
	return r
}

// valuePool hands out distinct 1 KiB slices of 16 MiB of random bytes:
// incompressible records, batch after batch.
type valuePool struct {
	data []byte
	k    atomic.Int64
}

func newValuePool() *valuePool {
	p := &valuePool{data: make([]byte, 16*mib)}
	_, _ = rand.Read(p.data)
	return p
}

func (p *valuePool) next() []byte {
	i := int(p.k.Add(1)) % (len(p.data) >> 10) << 10
	return p.data[i : i+1024 : i+1024]
}

// hist is a Prometheus histogram's state scraped from a server: sum,
// count and cumulative buckets (upper bound in seconds -> count).
type hist struct {
	sum, count float64
	le         map[float64]float64
}

// bounds are h's bucket bounds, in order.
func (h hist) bounds() []float64 { return slices.Sorted(maps.Keys(h.le)) }

// scrapeHists scrapes n's histograms whose series line starts with one of
// the prefixes and contains filter: "name{labels}" without _bucket/_sum/
// _count and le -> hist.
func scrapeHists(b *testing.B, n *proccluster.Node, filter string, names ...string) map[string]hist {
	out := map[string]hist{}
	resp, err := n.AdminClient.Get(n.AdminBase + "/metrics")
	if err != nil {
		b.Logf("metrics: %v", err)
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, filter) {
			continue
		}
		for _, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			kind, labels := "", ""
			for _, k := range []string{"_bucket", "_sum", "_count"} {
				if r, ok := strings.CutPrefix(rest, k); ok {
					kind, rest = k, r
				}
			}
			sp := strings.LastIndexByte(rest, ' ')
			if kind == "" || sp < 0 {
				continue
			}
			v, _ := strconv.ParseFloat(rest[sp+1:], 64)
			labels = rest[:sp]
			var le float64
			if i := strings.Index(labels, `le="`); i >= 0 {
				s := labels[i+4:]
				s = s[:strings.IndexByte(s, '"')]
				le, _ = strconv.ParseFloat(s, 64) // "+Inf" parses as +Inf
				labels = strings.TrimSuffix(strings.Replace(labels[:i]+labels[i+4+len(s)+1:], ",}", "}", 1), "{}")
			}
			key := name + labels
			h := out[key]
			switch kind {
			case "_sum":
				h.sum = v
			case "_count":
				h.count = v
			default:
				if h.le == nil {
					h.le = map[float64]float64{}
				}
				h.le[le] = v
			}
			out[key] = h
		}
	}
	return out
}

// histDelta describes what a histogram observed between two scrapes: its
// mean and the bucket bounds below which 50 % and 99 % fell, in ms.
func histDelta(a, z hist) string {
	k := z.count - a.count
	if k <= 0 {
		return "-"
	}
	below := func(q float64) float64 {
		for _, le := range z.bounds() {
			if z.le[le]-a.le[le] >= q*k {
				return le
			}
		}
		return math.Inf(1)
	}
	return fmt.Sprintf("mean %.2f p50 <= %.1f p99 <= %.1f ms (%.0f)", 1000*(z.sum-a.sum)/k, 1000*below(0.5), 1000*below(0.99), k)
}
