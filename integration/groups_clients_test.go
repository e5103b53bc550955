package integration

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceValues writes vs to s1 with acks=all and waits for them.
func produceValues(t *testing.T, c *Cluster, vs []string) {
	t.Helper()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic("s1"))
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range vs {
		p.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) { require.NoError(t, err) })
	}
	require.NoError(t, p.Flush(ctx))
}

// TestKcatGroup: librdkafka's balanced consumer (kcat -G) consumes, commits
// on close, and a second run resumes at the committed offset: nothing
// skipped, nothing delivered twice.
func TestKcatGroup(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat; .ci/run installs it)")
	}
	c := StartCluster(t, Options{})
	c.WaitLeader("s1", 20*time.Second)
	consume := func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// No -o: kcat would force that offset over the committed one.
		cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(c.KafkaAddrs(), ","), "-G", "kcat-group",
			"-e", "-q", "-f", "%s\n", "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "s1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "kcat -G: %s", stderr.String())
		return strings.Fields(string(out))
	}
	first := values(50, "kg1-")
	produceValues(t, c, first)
	require.Equal(t, first, consume())
	second := values(30, "kg2-")
	produceValues(t, c, second)
	require.Equal(t, second, consume(), "resumes at the committed offset")
}

// groupHandler consumes up to n records, marking each, then stops.
type groupHandler struct {
	n    int
	got  []string
	done chan struct{}
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.got = append(h.got, string(m.Value))
		s.MarkMessage(m, "")
		if len(h.got) == h.n {
			s.Commit()
			close(h.done)
			return nil
		}
	}
	return nil
}

// TestSaramaConsumerGroup (0.10.2.0 and 2.1.0) on a real cluster: consume
// half, commit, stop; a new consumer of the group resumes right after.
func TestSaramaConsumerGroup(t *testing.T) {
	for _, v := range []sarama.KafkaVersion{sarama.V0_10_2_0, sarama.V2_1_0_0} {
		t.Run(v.String(), func(t *testing.T) {
			c := StartCluster(t, Options{})
			c.WaitLeader("s1", 20*time.Second)
			all := values(60, "sg-")
			produceValues(t, c, all)
			run := func(n int) []string {
				cfg := sarama.NewConfig()
				cfg.Version = v
				cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
				cfg.Consumer.Offsets.AutoCommit.Enable = false
				g, err := sarama.NewConsumerGroup(c.KafkaAddrs(), "sarama-group", cfg)
				require.NoError(t, err)
				defer g.Close()
				h := &groupHandler{n: n, done: make(chan struct{})}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				go func() {
					for ctx.Err() == nil {
						if err := g.Consume(ctx, []string{"s1"}, h); err != nil {
							return
						}
					}
				}()
				select {
				case <-h.done:
				case <-ctx.Done():
					t.Fatalf("sarama group consumer got %d of %d", len(h.got), n)
				}
				return h.got
			}
			require.Equal(t, all[:30], run(30))
			require.Equal(t, all[30:], run(30), "resumes at the committed offset")
		})
	}
}

// TestKafkaGoGroupReader on a real cluster: a Reader with GroupID commits
// what it read; a new Reader of the group resumes after it.
func TestKafkaGoGroupReader(t *testing.T) {
	c := StartCluster(t, Options{})
	c.WaitLeader("s1", 20*time.Second)
	all := values(40, "kgo-g-")
	produceValues(t, c, all)
	read := func(n int) []string {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.KafkaAddrs(), GroupID: "kafkago-group", Topic: "s1",
			StartOffset: kafkago.FirstOffset, MaxWait: 200 * time.Millisecond, CommitInterval: 0})
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var got []string
		for len(got) < n {
			m, err := r.FetchMessage(ctx)
			require.NoError(t, err, "after %d messages", len(got))
			got = append(got, string(m.Value))
			require.NoError(t, r.CommitMessages(ctx, m))
		}
		return got
	}
	require.Equal(t, all[:20], read(20))
	require.Equal(t, all[20:], read(20), "resumes at the committed offset")
}

// TestFranzGoDefaultBalancerGroup: franz-go's default (cooperative-sticky)
// group consumer on a real cluster: consume and commit, stop, restart →
// resume at the committed offset.
func TestFranzGoDefaultBalancerGroup(t *testing.T) {
	c := StartCluster(t, Options{})
	c.WaitLeader("s1", 20*time.Second)
	all := values(40, "coop-")
	produceValues(t, c, all)
	consume := func(n int) []string {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.ConsumerGroup("coop"), kgo.ConsumeTopics("s1"),
			kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		defer cl.Close() // leaves the group
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var got []string
		for len(got) < n {
			fs := cl.PollRecords(ctx, n-len(got))
			require.NoError(t, ctx.Err(), "got %d of %d", len(got), n)
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			require.NoError(t, cl.CommitUncommittedOffsets(ctx))
		}
		return got
	}
	require.Equal(t, all[:25], consume(25))
	require.Equal(t, all[25:], consume(15), "resumes at the committed offset")
}
