package integration

import (
	"context"
	"crypto/rand"
	"fmt"
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
	"github.com/vdl-project/vdl/internal/selfcpu"
)

const (
	mib       = 1 << 20
	pacedRate = 5000 // records/s of the paced latency phase (5 MB/s)
)

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func pacedDur(d time.Duration) time.Duration { return min(5*time.Second, max(2*time.Second, d/4)) }

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

type pacedResult struct {
	records        int64
	rate           float64
	p50, p99, p999 time.Duration
	errs           int64
}

// pacedProduce produces rate records/s (1 KiB values, acks=all) from one
// client for d and returns the per-record latency percentiles.
func pacedProduce(b *testing.B, brokers []string, stream string, rate int, d time.Duration) pacedResult {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(stream),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(0), kgo.DisableIdempotentWrite())
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	// Warm up: metadata and the connection to the leader.
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 1<<10)
	_, _ = rand.Read(value)
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	ctx := context.Background()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	for time.Since(start) < d {
		<-tick.C
		due := int64(time.Since(start).Seconds() * float64(rate))
		for ; sent < due; sent++ {
			t0 := time.Now()
			cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				dd := time.Since(t0)
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
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	mu.Lock()
	defer mu.Unlock()
	p := percentiles(lat)
	return pacedResult{records: int64(len(lat)), rate: float64(len(lat)) / secs, p50: p[0], p99: p[1], p999: p[2], errs: errs.Load()}
}

// percentiles returns p50, p99, p99.9 (sorts d).
func percentiles(d []time.Duration) [3]time.Duration {
	slices.Sort(d)
	var out [3]time.Duration
	if len(d) == 0 {
		return out
	}
	for i, q := range []float64{0.50, 0.99, 0.999} {
		out[i] = d[min(len(d)-1, int(q*float64(len(d))))]
	}
	return out
}

// BenchmarkE2E measures a local 3-node cluster (three processes, data dirs
// on one disk) end to end with franz-go: produce throughput and per-record
// latency (1 KiB values, acks=all), tail and catch-up consume throughput,
// beside the raw disk limit measured in the same run. Run it once:
//
//	make bench-e2e   # go test -run '^$' -bench BenchmarkE2E -benchtime 1x ./integration/
//
// VDL_BENCH_SECONDS sets the produce phase (default 20, 5 with -short);
// VDL_BENCH_DIR puts the data dirs (and the raw-disk file) on another file
// system. Method and figures: docs/performance.md.
func BenchmarkE2E(b *testing.B) {
	dur := 20 * time.Second
	if testing.Short() {
		dur = 5 * time.Second
	}
	if s := os.Getenv("VDL_BENCH_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("VDL_BENCH_SECONDS: %v", err)
		}
		dur = time.Duration(n) * time.Second
	}
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
		runE2E(b, dir, dur)
	}
}

type e2eResult struct {
	rawMBps, raw3MBps              float64
	produced                       int64
	produceSecs                    float64
	p50, p99, p999                 time.Duration
	liveTailMBps, liveLagRecords   float64
	tailMBps, tailMBps2, tailMB    float64
	paced                          pacedResult
	serverCPU, clientCPU           float64 // CPU seconds of the 3 servers / the bench process during the produce run
	loadBefore                     string
	catchupMBps, catchupMB         float64
	produceErrs                    int64
	producers, valueSize, inflight int
}

func runE2E(b *testing.B, dir string, dur time.Duration) {
	producers := envInt(b, "VDL_BENCH_PRODUCERS", 4)
	inflight := envInt(b, "VDL_BENCH_INFLIGHT", 1)
	const (
		valueSize  = 1 << 10
		tailCache  = 192 * mib
		tailReadMB = 128
		stream     = "bench"
	)
	r := e2eResult{producers: producers, valueSize: valueSize, inflight: inflight}

	// 1. The cluster. (The raw disk limit is measured last, step 8: its
	// burst of writes leaves the device busy for a while and would delay
	// whatever runs right after it.)
	c := StartCluster(b, Options{Dir: filepath.Join(dir, "cluster"), Streams: []string{stream},
		TickMillis: 100, TailCacheBytes: tailCache, LogLevel: "warn"})
	brokers := c.KafkaAddrs()

	// 2. Latency at a paced load: one client, pacedRate records/s.
	r.paced = pacedProduce(b, brokers, stream, pacedRate, pacedDur(dur))

	// 3. A live tail consumer, from the log end, following the producers.
	var liveBytes, liveRecs atomic.Int64
	liveCtx, liveStop := context.WithCancel(context.Background())
	liveDone := make(chan struct{})
	live := newConsumer(b, brokers, stream, -1)
	go func() {
		defer close(liveDone)
		for liveCtx.Err() == nil {
			fs := live.PollFetches(liveCtx)
			fs.EachRecord(func(rec *kgo.Record) {
				liveBytes.Add(int64(len(rec.Value)))
				liveRecs.Add(1)
			})
		}
	}()

	// 4. Produce for dur with `producers` clients, as fast as they go.
	value := make([]byte, valueSize)
	_, _ = rand.Read(value) // incompressible (compression is off anyway)
	lat := make([][]time.Duration, producers)
	var errs atomic.Int64
	var acked atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	r.loadBefore = loadAvg()
	cpu0, self0 := c.CPUSeconds(), selfcpu.Used().Seconds()
	startProduce := time.Now()
	for p := 0; p < producers; p++ {
		opts := append(loaderOpts(brokers), kgo.DefaultProduceTopic(stream))
		// The plain producer, as the figures before idempotence was served:
		// kgo keeps one request in flight without idempotence unless told
		// (BenchmarkIdempotentProduce compares it with the idempotent one).
		opts = append(opts, kgo.DisableIdempotentWrite())
		if inflight > 1 {
			opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(inflight))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mu sync.Mutex
			local := make([]time.Duration, 0, 1<<20)
			for ctx.Err() == nil {
				t0 := time.Now()
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					d := time.Since(t0)
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					acked.Add(1)
					mu.Lock()
					local = append(local, d)
					mu.Unlock()
				})
			}
			// Records still buffered at the deadline fail with the context;
			// wait for every promise before reading the latencies.
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = cl.Flush(fctx)
			fcancel()
			mu.Lock()
			lat[p] = local
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.produceSecs = time.Since(startProduce).Seconds()
	r.serverCPU = c.CPUSeconds() - cpu0
	r.clientCPU = selfcpu.Used().Seconds() - self0
	r.produced = acked.Load()
	r.produceErrs = errs.Load()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	pc := percentiles(all)
	r.p50, r.p99, r.p999 = pc[0], pc[1], pc[2]

	// The live tail consumer over the produce window: its bytes, and how far
	// behind the log end it was when the producers stopped.
	leader := c.WaitLeader(stream, 20*time.Second)
	ls, err := c.StreamStatus(leader, stream)
	if err != nil {
		b.Fatal(err)
	}
	hwm := ls.HighWatermark
	r.liveTailMBps = float64(liveBytes.Load()) / mib / r.produceSecs
	r.liveLagRecords = float64(hwm - r.paced.records - liveRecs.Load())
	liveStop()
	<-liveDone
	live.Close()

	// 5-6. Tail read: the newest tailReadMB of the log, all in the leader's
	// tail cache, read right behind the producers by a fresh consumer.
	// Read twice: the first read right after the producers stop shares the
	// CPU with the servers' post-run work; the second is the steady state.
	tailRecs := min(hwm, int64(tailReadMB)*mib/valueSize)
	r.tailMB, r.tailMBps = readRange(b, brokers, stream, hwm-tailRecs, hwm)
	_, r.tailMBps2 = readRange(b, brokers, stream, hwm-tailRecs, hwm)

	// 7. Catch-up read: the whole log from offset 0.
	r.catchupMB, r.catchupMBps = readRange(b, brokers, stream, 0, hwm)

	// 8. The raw disk limit, in the file system of the data dirs, with the
	// cluster idle.
	if r.rawMBps, err = diskprobe.Measure(dir, 256<<10, 1, 3*time.Second); err != nil {
		b.Fatal(err)
	}
	// And three writers at once, as the three replicas write: their
	// aggregate is what the device gives to interleaved fdatasync streams.
	if r.raw3MBps, err = diskprobe.Measure(dir, 256<<10, 3, 3*time.Second); err != nil {
		b.Fatal(err)
	}

	report(b, r)
}

// newConsumer consumes the stream's partition from offset from (-1: the end).
func newConsumer(b *testing.B, brokers []string, stream string, from int64) *kgo.Client {
	at := kgo.NewOffset().At(from)
	if from < 0 {
		at = kgo.NewOffset().AtEnd()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: at}}),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxBytes(64*mib), kgo.FetchMaxPartitionBytes(32*mib))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// readRange consumes [from, to) and returns MiB read and MiB/s.
func readRange(b *testing.B, brokers []string, stream string, from, to int64) (float64, float64) {
	if to <= from {
		return 0, 0
	}
	cl := newConsumer(b, brokers, stream, from)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var n, bytes, firstBytes int64
	var start time.Time
	for from+n < to {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("read [%d, %d) stuck at %d", from, to, from+n)
		}
		fs.EachError(func(_ string, _ int32, err error) { b.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset < to {
				n++
				bytes += int64(len(rec.Value))
			}
		})
		if start.IsZero() && n > 0 {
			// The clock starts at the first records: client bootstrap
			// (metadata, connection) is not throughput.
			start, firstBytes = time.Now(), bytes
		}
	}
	secs := time.Since(start).Seconds()
	return float64(bytes) / mib, float64(bytes-firstBytes) / mib / secs
}

func report(b *testing.B, r e2eResult) {
	mbps := float64(r.produced) * float64(r.valueSize) / mib / r.produceSecs
	limit := r.rawMBps / 3
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	tail := max(r.tailMBps, r.tailMBps2)
	b.ReportMetric(r.rawMBps, "raw-MB/s")
	b.ReportMetric(r.raw3MBps, "raw3writers-MB/s")
	b.ReportMetric(mbps, "produce-MB/s")
	b.ReportMetric(float64(r.produced)/r.produceSecs, "msgs/s")
	b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.p999.Microseconds())/1000, "p999-ms")
	b.ReportMetric(tail, "tail-MB/s")
	b.ReportMetric(r.catchupMBps, "catchup-MB/s")
	fmt.Printf(`
VDL end-to-end benchmark, TUNED (tail_cache_bytes 192 MiB; producers: linger 1 ms, no idempotence,
no compression, 2048 buffered records; consumers: 32 MiB partition fetches; BenchmarkProduceDefaults
has the defaults): 3 vdl processes on 127.0.0.1, data dirs on one disk, franz-go clients,
%d B values, acks=all (MB = MiB; load average before the produce run: %s)

  raw disk: 256 KiB WriteAt + fdatasync      %8.1f MB/s  -> limit for 3 replicas on one disk: raw/3 = %.1f MB/s
                                                          (measured after the cluster phases, same file system)
  raw disk, 3 writers at once                %8.1f MB/s aggregate -> /3 = %.1f MB/s

  produce, %d clients (%d request(s) in flight each) as fast as they go, %.1f s
    throughput                               %8.1f MB/s  %8.0f msgs/s  (%d acked, %d errors)
    vs raw/3                                 %7.0f %%     target >= 80%% of raw/3: %s
    latency, produce call -> promise         p50 %s  p99 %s  p99.9 %s  (saturated: includes client queueing)
    CPU during the run                       servers %.2f cores, bench process (clients) %.2f cores; the machine has %d
  produce, 1 client paced at %d msgs/s
    latency, produce call -> promise         p50 %s  p99 %s  p99.9 %s  (%d records, %.0f msgs/s, %d errors)

  consume, franz-go partition consumer
    live tail during the produce run         %8.1f MB/s  (bounded by the produce rate; %.0f records behind at the end)
    tail read, newest %.0f MB (tail cache)      %8.1f MB/s  first read right after the run; %.1f MB/s second read
                                                           target >= 300 MB/s: %s (best of the two: %.1f MB/s)
    catch-up read, %.0f MB from offset 0        %8.1f MB/s
`, r.valueSize, r.loadBefore,
		r.rawMBps, limit,
		r.raw3MBps, r.raw3MBps/3,
		r.producers, r.inflight, r.produceSecs,
		mbps, float64(r.produced)/r.produceSecs, r.produced, r.produceErrs,
		100*mbps/limit, met(mbps >= 0.8*limit),
		ms(r.p50), ms(r.p99), ms(r.p999),
		r.serverCPU/r.produceSecs, r.clientCPU/r.produceSecs, runtime.NumCPU(),
		pacedRate, ms(r.paced.p50), ms(r.paced.p99), ms(r.paced.p999), r.paced.records, r.paced.rate, r.paced.errs,
		r.liveTailMBps, r.liveLagRecords,
		r.tailMB, r.tailMBps, r.tailMBps2, met(tail >= 300), tail,
		r.catchupMB, r.catchupMBps)
}
