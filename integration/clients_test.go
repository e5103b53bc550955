package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/clienttest"
)

var profiles = []string{"modern", "kafka-0.10"}

func values(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// scale returns n, or n/5 (at least 20) with -short.
func scale(n int) int {
	if testing.Short() {
		return max(20, n/5)
	}
	return n
}

// requireEndOffset asserts that every node's log of the stream ends at want
// once replication settled (nothing extra was written: exactly once).
func requireEndOffset(t *testing.T, c *Cluster, stream string, want int64) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			s, err := c.StreamStatus(n.ID, stream)
			if !assert.NoError(ct, err) {
				return
			}
			assert.Equal(ct, want, s.EndOffset, "node %d end offset", n.ID)
			assert.Equal(ct, want, s.HighWatermark, "node %d high watermark", n.ID)
		}
	}, 10*time.Second, 50*time.Millisecond)
}

// kgoConsume reads n records of a stream from offset `from` with a
// partition consumer and asserts offsets from, from+1, ...; it then asserts
// that nothing follows.
func kgoConsume(t *testing.T, brokers []string, stream string, from int64, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), n)
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, from+int64(len(got)), r.Offset)
			got = append(got, string(r.Value))
		})
	}
	// Nothing after the n records.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	fs := cl.PollFetches(ctx2)
	extra := 0
	fs.EachRecord(func(*kgo.Record) { extra++ })
	require.Zero(t, extra, "records after the expected end")
	return got
}

// TestFranzGo: kgo with acks=all and default idempotence (on the modern
// profile an idempotent producer; kafka-0.10 has no InitProducerId, and kgo
// falls back to plain produces) produces N values on each profile; a partition consumer from offset 0 reads every
// value exactly once, in order, at offsets 0..N-1.
func TestFranzGo(t *testing.T) {
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			c := StartCluster(t, Options{Profile: profile})
			const stream = "s1"
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond))
			require.NoError(t, err)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			want := values(scale(2000), "kgo-"+profile+"-")
			// A few synchronous produces first, then many asynchronous ones.
			for i, v := range want[:10] {
				r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
				require.NoError(t, err)
				require.Equal(t, int64(i), r.Offset)
			}
			offsets := make([]int64, len(want))
			errs := make(chan error, len(want))
			for i, v := range want[10:] {
				i := i + 10
				cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
					offsets[i] = r.Offset
					errs <- err
				})
			}
			require.NoError(t, cl.Flush(ctx))
			for range want[10:] {
				require.NoError(t, <-errs)
			}
			for i := range want[10:] {
				require.Equal(t, int64(i+10), offsets[i+10], "offset of record %d", i+10)
			}
			got := kgoConsume(t, c.KafkaAddrs(), stream, 0, len(want))
			require.Equal(t, want, got)
			requireEndOffset(t, c, stream, int64(len(want)))
		})
	}
}

func saramaConfig(ver sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = ver
	cfg.ClientID = "vdl-integration"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	return cfg
}

// saramaConsume reads n messages from the oldest offset with a partition
// consumer, asserting offsets 0..n-1, then that nothing follows.
func saramaConsume(t *testing.T, brokers []string, cfg *sarama.Config, stream string, n int) []string {
	t.Helper()
	cons, err := sarama.NewConsumer(brokers, cfg)
	require.NoError(t, err)
	defer cons.Close()
	pc, err := cons.ConsumePartition(stream, 0, sarama.OffsetOldest)
	require.NoError(t, err)
	defer pc.Close()
	got := clienttest.ReadPartition(t, pc, n)
	select {
	case m := <-pc.Messages():
		t.Fatalf("unexpected message at offset %d: %q", m.Offset, m.Value)
	case <-time.After(500 * time.Millisecond):
	}
	return got
}

// TestSarama: sarama at Version 0.10.2.0 (on both profiles: the modern one
// down-converts) and 2.1.0 (modern): SyncProducer values get offsets 0, 1,
// ...; AsyncProducer values follow in send order; a partition consumer from
// the oldest offset reads everything exactly once, in order.
func TestSarama(t *testing.T) {
	cases := []struct {
		profile string
		vers    []sarama.KafkaVersion
	}{
		{"modern", []sarama.KafkaVersion{sarama.V2_1_0_0, sarama.V0_10_2_0}},
		{"kafka-0.10", []sarama.KafkaVersion{sarama.V0_10_2_0}},
	}
	for _, tc := range cases {
		t.Run(tc.profile, func(t *testing.T) {
			var streams []string
			for _, v := range tc.vers {
				streams = append(streams, "sarama-"+v.String())
			}
			c := StartCluster(t, Options{Profile: tc.profile, Streams: streams})
			for i, ver := range tc.vers {
				stream := streams[i]
				t.Run(ver.String(), func(t *testing.T) {
					cfg := saramaConfig(ver)
					sp, err := sarama.NewSyncProducer(c.KafkaAddrs(), cfg)
					require.NoError(t, err)
					want := values(scale(200), "sync-")
					for i, v := range want {
						p, off, err := sp.SendMessage(&sarama.ProducerMessage{Topic: stream, Value: sarama.StringEncoder(v)})
						require.NoError(t, err)
						require.Equal(t, int32(0), p)
						require.Equal(t, int64(i), off)
					}
					require.NoError(t, sp.Close())

					ap, err := sarama.NewAsyncProducer(c.KafkaAddrs(), cfg)
					require.NoError(t, err)
					async := values(scale(1000), "async-")
					go func() {
						for i, v := range async {
							ap.Input() <- &sarama.ProducerMessage{Topic: stream, Value: sarama.StringEncoder(v), Metadata: i}
						}
					}()
					base := int64(len(want))
					for range async {
						select {
						case m := <-ap.Successes():
							// Exactly once and in send order: message i at base+i.
							require.Equal(t, base+int64(m.Metadata.(int)), m.Offset)
						case err := <-ap.Errors():
							t.Fatalf("async produce: %v", err)
						case <-time.After(30 * time.Second):
							t.Fatal("async produce timed out")
						}
					}
					require.NoError(t, ap.Close())
					want = append(want, async...)
					got := saramaConsume(t, c.KafkaAddrs(), cfg, stream, len(want))
					require.Equal(t, want, got)
					requireEndOffset(t, c, stream, int64(len(want)))
				})
			}
		})
	}
}

// TestKafkaGo: segmentio/kafka-go Writer with RequiredAcks = RequireAll (a
// bare Writer would use acks=0) and a Reader without GroupID positioned with
// SetOffset (0, then a middle offset): every value exactly once, in order.
func TestKafkaGo(t *testing.T) {
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			c := StartCluster(t, Options{Profile: profile})
			const stream = "s1"
			w := &kafkago.Writer{Addr: kafkago.TCP(c.KafkaAddrs()...), Topic: stream,
				RequiredAcks: kafkago.RequireAll, Balancer: &kafkago.LeastBytes{},
				BatchTimeout: 2 * time.Millisecond, MaxAttempts: 10}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			want := values(scale(1000), "seg-")
			for i := 0; i < len(want); i += 50 {
				var msgs []kafkago.Message
				for _, v := range want[i:min(i+50, len(want))] {
					msgs = append(msgs, kafkago.Message{Value: []byte(v)})
				}
				require.NoError(t, w.WriteMessages(ctx, msgs...))
			}
			require.NoError(t, w.Close())
			st := w.Stats()
			require.Equal(t, int64(len(want)), st.Messages)
			require.Zero(t, st.Errors)

			read := func(from int64) []string {
				r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.KafkaAddrs(), Topic: stream, Partition: 0,
					MaxWait: 200 * time.Millisecond})
				defer r.Close()
				require.NoError(t, r.SetOffset(from))
				var got []string
				for int(from)+len(got) < len(want) {
					m, err := r.ReadMessage(ctx)
					require.NoError(t, err, "after %d", len(got))
					require.Equal(t, from+int64(len(got)), m.Offset)
					got = append(got, string(m.Value))
				}
				require.Equal(t, int64(0), r.Lag(), "reader lag at the end")
				return got
			}
			require.Equal(t, want, read(0))
			mid := int64(len(want) / 3)
			require.Equal(t, want[mid:], read(mid))
			requireEndOffset(t, c, stream, int64(len(want)))
		})
	}
}

// TestKcat: librdkafka 2.0.2's kcat: -L (-J) lists the stream with its
// leader, replicas and ISR; -P produces lines with acks=all; -C -o beginning
// -e reads them back exactly once, in order, at offsets 0..N-1. On both
// profiles (librdkafka negotiates with ApiVersions).
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat; .ci/run installs it): skipping the librdkafka test")
	}
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			c := StartCluster(t, Options{Profile: profile})
			const stream = "s1"
			leader := c.WaitLeader(stream, 20*time.Second)
			brokers := strings.Join(c.KafkaAddrs(), ",")
			common := []string{"-b", brokers, "-X", "api.version.request=true"}
			run := func(stdin []byte, args ...string) []byte {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, kcat, append(common, args...)...)
				cmd.Stdin = bytes.NewReader(stdin)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				require.NoError(t, err, "kcat %v: %s", args, stderr.String())
				return out
			}

			var md struct {
				Brokers []struct {
					ID   int32  `json:"id"`
					Name string `json:"name"`
				} `json:"brokers"`
				Topics []struct {
					Topic      string `json:"topic"`
					Partitions []struct {
						Partition int32                `json:"partition"`
						Leader    int32                `json:"leader"`
						Replicas  []struct{ ID int32 } `json:"replicas"`
						ISRs      []struct{ ID int32 } `json:"isrs"`
					} `json:"partitions"`
				} `json:"topics"`
			}
			out := run(nil, "-L", "-J", "-t", stream)
			require.NoError(t, json.Unmarshal(out, &md), "%s", out)
			require.Len(t, md.Brokers, 3)
			var names []string
			for _, b := range md.Brokers {
				names = append(names, b.Name)
			}
			for _, n := range c.Nodes {
				require.Contains(t, names, n.Kafka)
			}
			require.Len(t, md.Topics, 1)
			require.Equal(t, stream, md.Topics[0].Topic)
			require.Len(t, md.Topics[0].Partitions, 1)
			p := md.Topics[0].Partitions[0]
			require.Equal(t, int32(0), p.Partition)
			require.Equal(t, int32(leader), p.Leader)
			ids := func(xs []struct{ ID int32 }) []int32 {
				var out []int32
				for _, x := range xs {
					out = append(out, x.ID)
				}
				slices.Sort(out)
				return out
			}
			require.Equal(t, []int32{1, 2, 3}, ids(p.Replicas))
			require.Equal(t, []int32{1, 2, 3}, ids(p.ISRs))

			want := values(scale(500), "kcat-"+profile+"-")
			run([]byte(strings.Join(want, "\n")+"\n"), "-P", "-t", stream, "-p", "0",
				"-X", "request.required.acks=-1")
			out = run(nil, "-C", "-t", stream, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %s\n")
			var got []string
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				off, val, ok := strings.Cut(sc.Text(), " ")
				require.True(t, ok, "line %q", sc.Text())
				require.Equal(t, strconv.Itoa(len(got)), off)
				got = append(got, val)
			}
			require.Equal(t, want, got)
			requireEndOffset(t, c, stream, int64(len(want)))
		})
	}
}
