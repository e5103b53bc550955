package integration

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// BenchmarkKafka010: the Kafka 0.10 profile on defaults with sarama at
// Version 0.10.0.0 (Produce v2, Fetch v2: stored v2 batches down-converted
// to MessageSet v1 on every fetch), default producer and consumer
// settings, 16 KiB values: the consumer's MB/s beside the producer's in
// the same run (target: consuming >= 3x faster). VDL_BENCH_LEGACY_MB sets
// the volume (default 128 MiB).
//
//	make bench-read   # with BenchmarkReadDefaults
func BenchmarkKafka010(b *testing.B) {
	total := envInt(b, "VDL_BENCH_LEGACY_MB", 128) * mib
	const stream = "legacy"
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break
		}
		c := StartCluster(b, Options{Profile: "kafka-0.10", Streams: []string{stream}, LogLevel: "warn"})
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V0_10_0_0
		cfg.Producer.Return.Successes = true
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		value := make([]byte, 16<<10)
		_, _ = rand.Read(value)
		n := total / len(value)

		ap, err := sarama.NewAsyncProducer(c.KafkaAddrs(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		go func() {
			for range n {
				ap.Input() <- &sarama.ProducerMessage{Topic: stream, Value: sarama.ByteEncoder(value)}
			}
		}()
		for k := range n {
			select {
			case <-ap.Successes():
			case err := <-ap.Errors():
				b.Fatalf("produce %d: %v", k, err)
			}
		}
		produce := float64(total) / mib / time.Since(start).Seconds()
		if err := ap.Close(); err != nil {
			b.Fatal(err)
		}

		var consume []float64
		for range 2 {
			cons, err := sarama.NewConsumer(c.KafkaAddrs(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			pc, err := cons.ConsumePartition(stream, 0, sarama.OffsetOldest)
			if err != nil {
				b.Fatal(err)
			}
			var t0 time.Time
			for k := range n {
				select {
				case m := <-pc.Messages():
					if k == 0 {
						t0 = time.Now()
					}
					if m.Offset != int64(k) || len(m.Value) != len(value) {
						b.Fatalf("message %d: offset %d, %d bytes", k, m.Offset, len(m.Value))
					}
				case err := <-pc.Errors():
					b.Fatal(err)
				case <-time.After(30 * time.Second):
					b.Fatalf("consume timed out at %d of %d", k, n)
				}
			}
			consume = append(consume, float64(total-len(value))/mib/time.Since(t0).Seconds())
			_ = pc.Close()
			_ = cons.Close()
		}
		best := max(consume[0], consume[1])
		b.ReportMetric(produce, "produce-MB/s")
		b.ReportMetric(best, "consume-MB/s")
		b.ReportMetric(best/produce, "consume/produce")
		fmt.Printf(`
Kafka 0.10 profile on defaults: sarama Version 0.10.0.0 (Produce v2, Fetch v2 down-converted to
MessageSet v1), default producer and consumer settings, %d x 16 KiB values (MB = MiB; shared machine)

  produce (async producer)                  %7.1f MB/s
  consume from the oldest offset            %7.1f / %7.1f MB/s (run 1 / run 2)
    consume / produce                       %7.1fx  target >= 3x: %s
`, n, produce, consume[0], consume[1], best/produce, metStr(best >= 3*produce))
	}
}
