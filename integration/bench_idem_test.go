package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/selfcpu"
)

// BenchmarkIdempotentProduce: produce throughput of franz-go's idempotent
// producer beside its plain producer, on one 3-process cluster in one run
// (1 KiB values, acks=all, no compression, 4 clients, 5 requests in flight
// each: the idempotent producer's maximum, given to the plain one too, so
// that only the server's work differs). After a warm-up the phases run
// plain, idempotent, idempotent, plain on one stream (the order cancels a
// drift); the figure is each mode's mean and the ratio (target: idempotent
// >= 95% of plain). Run it once:
//
//	go test -run '^$' -bench '^BenchmarkIdempotentProduce$' -benchtime 1x ./integration/
//
// VDL_BENCH_SECONDS sets each phase (default 8, 3 with -short);
// VDL_BENCH_DIR puts the data dirs on another file system. Figures:
// docs/performance.md.
func BenchmarkIdempotentProduce(b *testing.B) {
	phase := 8 * time.Second
	if testing.Short() {
		phase = 3 * time.Second
	}
	if s := os.Getenv("VDL_BENCH_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("VDL_BENCH_SECONDS: %v", err)
		}
		phase = time.Duration(n) * time.Second
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
		runIdemBench(b, dir, phase)
	}
}

func runIdemBench(b *testing.B, dir string, phase time.Duration) {
	const (
		stream    = "bench"
		producers = 4
		inflight  = 5
		valueSize = 1 << 10
	)
	c := StartCluster(b, Options{Dir: filepath.Join(dir, "cluster"), Streams: []string{stream},
		TickMillis: 100, TailCacheBytes: 192 * mib, LogLevel: "warn"})
	brokers := c.KafkaAddrs()
	value := make([]byte, valueSize)
	_, _ = rand.Read(value)

	// run produces for d with fresh clients and returns MB/s, msgs/s, the
	// servers' and the clients' CPU µs per message, and the errors.
	run := func(idempotent bool, d time.Duration) (float64, float64, float64, float64, int64) {
		var clients []*kgo.Client
		for range producers {
			opts := append(loaderOpts(brokers), kgo.DefaultProduceTopic(stream))
			if !idempotent {
				opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(inflight))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				b.Fatal(err)
			}
			// Warm up: metadata, the connection to the leader, the producer id.
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: value}).FirstErr(); err != nil {
				b.Fatal(err)
			}
			clients = append(clients, cl)
		}
		var acked, errs atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		cpu0, self0 := c.CPUSeconds(), selfcpu.Used().Seconds()
		start := time.Now()
		for _, cl := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
						if err != nil {
							if ctx.Err() == nil {
								errs.Add(1)
							}
							return
						}
						acked.Add(1)
					})
				}
				fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = cl.Flush(fctx)
				fcancel()
			}()
		}
		wg.Wait()
		secs := time.Since(start).Seconds()
		serverCPU, clientCPU := c.CPUSeconds()-cpu0, selfcpu.Used().Seconds()-self0
		for _, cl := range clients {
			cl.Close()
		}
		n := float64(acked.Load())
		return n * valueSize / mib / secs, n / secs, 1e6 * serverCPU / n, 1e6 * clientCPU / n, errs.Load()
	}

	// A warm-up phase (not counted: the first phase after the start runs
	// slower), then plain, idempotent, idempotent, plain: the order
	// cancels a drift over the run.
	run(false, phase/2)
	var plain, idem []idemSample
	var errs int64
	for _, idempotent := range []bool{false, true, true, false} {
		mb, msgs, scpu, ccpu, e := run(idempotent, phase)
		errs += e
		if idempotent {
			idem = append(idem, idemSample{mb, msgs, scpu, ccpu})
		} else {
			plain = append(plain, idemSample{mb, msgs, scpu, ccpu})
		}
	}
	mean := func(s []idemSample) (m idemSample) {
		for _, x := range s {
			k := float64(len(s))
			m.mbps += x.mbps / k
			m.msgs += x.msgs / k
			m.serverUs += x.serverUs / k
			m.clientUs += x.clientUs / k
		}
		return m
	}
	pm, im := mean(plain), mean(idem)
	pmb, pmsgs, imb, imsgs := pm.mbps, pm.msgs, im.mbps, im.msgs
	ratio := 100 * imb / pmb
	b.ReportMetric(pmb, "plain-MB/s")
	b.ReportMetric(imb, "idempotent-MB/s")
	b.ReportMetric(ratio, "idempotent-%")
	met := "met"
	if ratio < 95 {
		met = "NOT met"
	}
	fmt.Printf(`
VDL idempotent produce benchmark: 3 vdl processes on 127.0.0.1, data dirs on one disk, %d franz-go
clients, %d requests in flight each, %d B values, acks=all, no compression, a warm-up, then
phases of %s: plain, idempotent, idempotent, plain (MB = MiB; load average now: %s)

  plain producer       %8.1f MB/s  %8.0f msgs/s   phases: %s MB/s
  idempotent producer  %8.1f MB/s  %8.0f msgs/s   phases: %s MB/s
  idempotent / plain   %7.1f %%     target >= 95%%: %s   (%d errors)
  CPU per message      servers %.1f µs plain, %.1f µs idempotent; clients %.1f µs plain, %.1f µs idempotent
`, producers, inflight, valueSize, phase, loadAvg(),
		pmb, pmsgs, fmtRounds(plain), imb, imsgs, fmtRounds(idem), ratio, met, errs,
		pm.serverUs, im.serverUs, pm.clientUs, im.clientUs)
}

// idemSample is one phase's throughput and CPU per message.
type idemSample struct{ mbps, msgs, serverUs, clientUs float64 }

func fmtRounds(s []idemSample) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%.1f", x.mbps)
	}
	return out
}
