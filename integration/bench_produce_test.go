package integration

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/diskprobe"
)

// BenchmarkProduceDefaults: produce on the default server config (no
// tail_cache_bytes or other override; tick_ms 100, the server's default)
// with franz-go's default producer (SeedBrokers and DefaultProduceTopic
// only: idempotent, acks=all, snappy, linger 10 ms, 1 MB batches), 1 KiB
// random values, beside the disk's limit measured in the same run:
//
//   - 4 clients as fast as they go for VDL_BENCH_SECONDS (default 15, 5
//     with -short): MB/s against a third of the three-writer diskprobe
//     aggregate (three replicas share one disk). Target >= 85 %.
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

	sat := produceSaturated(b, c, brokers, stream, 4, dur)
	rate := int(float64(sat.acked) / sat.secs / 2)
	paced := pacedEndToEnd(b, brokers, stream, rate, 8*time.Second)

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
  produce, 4 clients as fast as they go, %.1f s
    throughput                               %8.1f MB/s  %8.0f msgs/s  (%d acked, %d errors)
    vs 3-writer aggregate / 3                %7.0f %%     target >= 85%%: %s
    CPU during the run                       servers %.2f cores, bench process (clients) %.2f cores; the machine has %d
  produce, 1 client paced at half that load: %d msgs/s (%.1f MB/s), %.0f s; a tailing consumer (defaults)
    latency, produce call -> promise         p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms   target p99 <= 10 ms: %s
    produce request round trip (kgo hook)    p50 %6.2f ms  p99 %6.2f ms  (%d requests)
    end to end, produce call -> delivered    p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  (%d records, %.0f msgs/s acked, %d errors)
`, sat.load, raw3, limit, raw1, raw1/3,
		sat.secs, mbps, float64(sat.acked)/sat.secs, sat.acked, sat.errs,
		100*mbps/limit, metStr(mbps >= 0.85*limit),
		sat.serverCPU/sat.secs, sat.clientCPU/sat.secs, runtime.NumCPU(),
		rate, float64(rate)/1024, paced.secs,
		ms(paced.produce[0]), ms(paced.produce[1]), ms(paced.produce[2]), metStr(paced.produce[1] <= 10*time.Millisecond),
		ms(paced.rtt[0]), ms(paced.rtt[1]), paced.requests,
		ms(paced.e2e[0]), ms(paced.e2e[1]), ms(paced.e2e[2]), paced.delivered, paced.rate, paced.errs)
}

// produceSaturated runs n default franz-go producers as fast as they go
// for d.
func produceSaturated(b *testing.B, c *Cluster, brokers []string, stream string, n int, d time.Duration) satResult {
	value := make([]byte, 1<<10)
	_, _ = rand.Read(value)
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
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: value}).FirstErr(); err != nil {
			b.Fatal(err)
		}
		clients[p] = cl
	}
	r := satResult{load: loadAvg()}
	cpu0, self0 := c.CPUSeconds(), selfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
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
	r.serverCPU, r.clientCPU = c.CPUSeconds()-cpu0, selfCPU()-self0
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
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; sent < due; sent++ {
			v := make([]byte, 1024)
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
