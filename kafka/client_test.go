package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/vdl-project/vdl/internal/clienttest"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

const topic = "s1"

// startServer runs a Server on 127.0.0.1 over an in-memory backend whose
// commits take a few milliseconds (so requests pipeline and long polls park).
func startServer(t *testing.T, profile string) (string, *kafkatest.Backend) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().(*net.TCPAddr)
	be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: int32(addr.Port)})
	be.AddStream(topic)
	be.AddStream(kafka.DefaultOffsetsTopic) // producer id blocks (InitProducerId)
	be.SetCommitDelay(2 * time.Millisecond)
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	srv, err := kafka.NewServer(kafka.Config{Profile: profile, ClusterID: "test"}, be, log)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, kafka.ErrServerClosed)
	})
	return addr.String(), be
}

func values(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// checkLog reads the whole stream through a session-free path (the backend)
// is not needed: each client test consumes with the client itself.
func requireExactlyOnceInOrder(t *testing.T, want, got []string) {
	t.Helper()
	require.Equal(t, len(want), len(got), "count")
	require.Equal(t, want, got)
}

func TestClientFranzGo(t *testing.T) {
	for _, profile := range []string{kafka.ProfileModern, kafka.ProfileKafka0102} {
		t.Run(profile, func(t *testing.T) {
			addr, _ := startServer(t, profile)
			// Idempotence stays at kgo's default (on): the modern profile
			// advertises InitProducerId; on kafka-0.10 kgo falls back to
			// plain produces.
			opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
				kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.ProducerLinger(time.Millisecond)}
			if profile == kafka.ProfileKafka0102 {
				opts = append(opts, kgo.MaxVersions(kversion.V0_10_2()))
			}
			cl, err := kgo.NewClient(opts...)
			require.NoError(t, err)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			want := values(500, "kgo-")
			// Async produce (many in flight), then one sync flush.
			errs := make(chan error, len(want))
			for _, v := range want {
				rec := &kgo.Record{Value: []byte(v)}
				if profile == kafka.ProfileModern {
					rec.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(v)}}
				}
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { errs <- err })
			}
			require.NoError(t, cl.Flush(ctx))
			for range want {
				require.NoError(t, <-errs)
			}

			cons, err := kgo.NewClient(append(opts[:1:1],
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
				kgo.FetchMaxWait(200*time.Millisecond))...)
			require.NoError(t, err)
			defer cons.Close()
			if profile == kafka.ProfileKafka0102 {
				cons.Close()
				cons, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V0_10_2()),
					kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
					kgo.FetchMaxWait(200*time.Millisecond))
				require.NoError(t, err)
				defer cons.Close()
			}
			var got []string
			for len(got) < len(want) {
				fs := cons.PollFetches(ctx)
				require.NoError(t, ctx.Err())
				fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch error: %v", err) })
				fs.EachRecord(func(r *kgo.Record) {
					require.Equal(t, int64(len(got)), r.Offset)
					if profile == kafka.ProfileModern {
						// Headers exist only in v2 batches: kgo used them
						// end to end.
						require.Len(t, r.Headers, 1)
						require.Equal(t, string(r.Value), string(r.Headers[0].Value))
					}
					got = append(got, string(r.Value))
				})
			}
			requireExactlyOnceInOrder(t, want, got)
		})
	}
}

func TestClientSarama(t *testing.T) {
	for _, ver := range []sarama.KafkaVersion{sarama.V0_10_2_0, sarama.V2_1_0_0} {
		t.Run(ver.String(), func(t *testing.T) {
			profile := kafka.ProfileModern
			if ver == sarama.V0_10_2_0 {
				profile = kafka.ProfileKafka0102
			}
			addr, _ := startServer(t, profile)
			cfg := sarama.NewConfig()
			cfg.Version = ver
			cfg.Producer.RequiredAcks = sarama.WaitForAll
			cfg.Producer.Return.Successes = true
			cfg.Producer.Partitioner = sarama.NewManualPartitioner
			cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
			cfg.Consumer.MaxWaitTime = 200 * time.Millisecond

			sp, err := sarama.NewSyncProducer([]string{addr}, cfg)
			require.NoError(t, err)
			want := values(100, "sync-")
			for i, v := range want {
				_, off, err := sp.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)})
				require.NoError(t, err)
				require.Equal(t, int64(i), off)
			}
			require.NoError(t, sp.Close())

			ap, err := sarama.NewAsyncProducer([]string{addr}, cfg)
			require.NoError(t, err)
			async := values(300, "async-")
			go func() {
				for _, v := range async {
					ap.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}
				}
			}()
			for range async {
				select {
				case <-ap.Successes():
				case err := <-ap.Errors():
					t.Fatalf("async produce: %v", err)
				case <-time.After(30 * time.Second):
					t.Fatal("async produce timed out")
				}
			}
			require.NoError(t, ap.Close())
			want = append(want, async...)

			c, err := sarama.NewConsumer([]string{addr}, cfg)
			require.NoError(t, err)
			defer c.Close()
			pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
			require.NoError(t, err)
			defer pc.Close()
			got := clienttest.ReadPartition(t, pc, len(want))
			// The async producer does not keep order across retries; the
			// log order is what counts: sync values first, in order.
			require.Equal(t, want[:100], got[:100])
			require.ElementsMatch(t, want, got)
			requireNoDuplicates(t, got)
		})
	}
}

func requireNoDuplicates(t *testing.T, got []string) {
	seen := map[string]bool{}
	for _, v := range got {
		require.False(t, seen[v], "duplicate %q", v)
		seen[v] = true
	}
}

func TestClientKafkaGo(t *testing.T) {
	addr, _ := startServer(t, kafka.ProfileModern)
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: topic, RequiredAcks: kafkago.RequireAll,
		Balancer: &kafkago.LeastBytes{}, BatchTimeout: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := values(200, "kgo-seg-")
	for i := 0; i < len(want); i += 20 {
		var msgs []kafkago.Message
		for _, v := range want[i : i+20] {
			msgs = append(msgs, kafkago.Message{Value: []byte(v)})
		}
		require.NoError(t, w.WriteMessages(ctx, msgs...))
	}
	require.NoError(t, w.Close())

	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	require.NoError(t, r.SetOffset(0))
	var got []string
	for len(got) < len(want) {
		m, err := r.ReadMessage(ctx)
		require.NoError(t, err, "after %d", len(got))
		require.Equal(t, int64(len(got)), m.Offset)
		got = append(got, string(m.Value))
	}
	requireExactlyOnceInOrder(t, want, got)
	_ = fmt.Sprint()
}
