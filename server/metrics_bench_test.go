package server

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

// BenchmarkProduceMetrics: produce throughput through the Kafka front end
// (a real listener on the loopback, franz-go with its default producer
// options, 1 KiB values, an in-memory backend that commits at once, so the
// front end's own cost shows) with the metrics observer and without it, in
// one run:
//
//	go test -run '^$' -bench BenchmarkProduceMetrics -count 3 ./server
func BenchmarkProduceMetrics(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  kafka.Observer
	}{{"metrics=off", nil}, {"metrics=on", newMetrics()}} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: int32(l.Addr().(*net.TCPAddr).Port)})
			be.AddStream("s")
			be.AddStream(kafka.DefaultOffsetsTopic) // the default producer is idempotent: producer ids
			srv, err := kafka.NewServer(kafka.Config{Observer: bc.obs}, be, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(l) }()
			defer srv.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(l.Addr().String()), kgo.DefaultProduceTopic("s"))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			// 4 MiB of random values: franz-go compresses batches, and
			// repeated values would make the bytes nothing.
			values := make([][]byte, 4096)
			for i := range values {
				values[i] = make([]byte, 1<<10)
				_, _ = rand.Read(values[i])
			}
			ctx := context.Background()
			b.SetBytes(1 << 10)
			b.ResetTimer()
			for i := range b.N {
				cl.Produce(ctx, &kgo.Record{Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
