package integration

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// BenchmarkTLS: produce and consume throughput through the Kafka TLS
// listener (TLS + SCRAM-SHA-512) beside the plain-text one, on one cluster
// in one run, phases alternating (plain, TLS, plain, TLS) so that a drift
// of the machine hits both alike. 1 KiB values, franz-go with its default
// producer and consumer options (acks=all), 4 producers. Consumes read
// the whole stream from offset 0.
//
//	make bench-tls   # go test -run '^$' -bench BenchmarkTLS -benchtime 1x ./integration/
//
// Figures: docs/security.md.
func BenchmarkTLS(b *testing.B) {
	if b.N > 1 {
		b.Skip("one run is the measurement: -benchtime 1x")
	}
	const (
		stream    = "s1"
		valueSize = 1 << 10
		producers = 4
	)
	phase := 5 * time.Second
	c := StartCluster(b, Options{})
	c.WaitLeader(stream, 20*time.Second)
	plainOpts := []kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...)}
	tlsOpts := []kgo.Opt{kgo.SeedBrokers(c.KafkaTLSAddrs()...), kgo.DialTLSConfig(c.ClientTLS()),
		kgo.SASL(scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism())}

	produce := func(opts []kgo.Opt) float64 {
		var acked atomic.Int64
		var wg sync.WaitGroup
		// Random values: franz-go compresses batches by default, and
		// zeros would make the bytes on the wire (and the disk) nothing.
		values := make([][]byte, 4096) // 4 MiB: no value repeats within a batch
		for i := range values {
			values[i] = make([]byte, valueSize)
			_, _ = rand.Read(values[i])
		}
		start := time.Now()
		for range producers {
			wg.Go(func() {
				cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(stream))...)
				if err != nil {
					b.Error(err)
					return
				}
				defer cl.Close()
				ctx := context.Background()
				for i := 0; time.Since(start) < phase; i++ {
					cl.Produce(ctx, &kgo.Record{Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
						if err == nil {
							acked.Add(1)
						}
					})
				}
				_ = cl.Flush(ctx)
			})
		}
		wg.Wait()
		return float64(acked.Load()*valueSize) / mib / time.Since(start).Seconds()
	}
	consume := func(opts []kgo.Opt) float64 {
		end := settledEnd(b, c, stream)
		cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}))...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var n, bytes int64
		start := time.Now()
		for n < end {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				b.Fatalf("consume stuck at %d of %d", n, end)
			}
			fs.EachError(func(_ string, _ int32, err error) { b.Fatalf("fetch: %v", err) })
			fs.EachRecord(func(r *kgo.Record) { n++; bytes += int64(len(r.Value)) })
		}
		return float64(bytes) / mib / time.Since(start).Seconds()
	}

	var prodPlain, prodTLS, consPlain, consTLS []float64
	for range 2 {
		prodPlain = append(prodPlain, produce(plainOpts))
		prodTLS = append(prodTLS, produce(tlsOpts))
	}
	for range 2 {
		consPlain = append(consPlain, consume(plainOpts))
		consTLS = append(consTLS, consume(tlsOpts))
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	b.ReportMetric(mean(prodPlain), "produce-plain-MB/s")
	b.ReportMetric(mean(prodTLS), "produce-tls-MB/s")
	b.ReportMetric(mean(prodTLS)/mean(prodPlain)*100, "produce-tls-%")
	b.ReportMetric(mean(consPlain), "consume-plain-MB/s")
	b.ReportMetric(mean(consTLS), "consume-tls-MB/s")
	b.ReportMetric(mean(consTLS)/mean(consPlain)*100, "consume-tls-%")
	b.Logf("produce MB/s plain %.1f TLS %.1f; consume MB/s plain %.1f TLS %.1f (each phase: %v)",
		prodPlain, prodTLS, consPlain, consTLS, phase)
}
