package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/kafka"
)

// saramaHandler consumes up to n messages, marking each and committing
// every 10 and at the end, then signals done.
type saramaHandler struct {
	n    int
	got  []*sarama.ConsumerMessage
	done chan struct{}
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		if len(h.got) >= h.n {
			return nil
		}
		h.got = append(h.got, m)
		sess.MarkMessage(m, "meta")
		if len(h.got)%10 == 0 || len(h.got) == h.n {
			sess.Commit() // synchronous
		}
		if len(h.got) == h.n {
			close(h.done)
			return nil
		}
	}
	return nil
}

func saramaConsume(t *testing.T, addr string, ver sarama.KafkaVersion, n int) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = ver
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 2 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 4 * time.Second
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cg, err := sarama.NewConsumerGroup([]string{addr}, "sg", cfg)
	require.NoError(t, err)
	h := &saramaHandler{n: n, done: make(chan struct{})}
	t0 := time.Now()
	defer func() { t.Logf("close done %v", time.Since(t0)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		t.Fatalf("sarama consumed %d of %d", len(h.got), n)
	}
	t.Logf("consumed %v", time.Since(t0))
	cancel()
	// Consume may see the cancel in the middle of a rejoin and say so.
	if err := <-errc; !errors.Is(err, context.Canceled) {
		require.NoError(t, err)
	}
	t.Logf("consume returned %v", time.Since(t0))
	require.NoError(t, cg.Close())
	return h.got
}

func TestGroupSaramaResumeFromCommit(t *testing.T) {
	for _, ver := range []sarama.KafkaVersion{sarama.V0_10_2_0, sarama.V2_1_0_0, sarama.V2_4_0_0} {
		t.Run(ver.String(), func(t *testing.T) {
			profile := kafka.ProfileModern
			if ver == sarama.V0_10_2_0 {
				profile = kafka.ProfileKafka0102
			}
			addr, _, srv := startGroupServer(t, profile)
			want := values(60, "v")
			produceValues(t, addr, want)
			t0 := time.Now()
			first := saramaConsume(t, addr, ver, 25)
			t.Logf("first consume %v", time.Since(t0))
			require.Equal(t, int64(0), first[0].Offset)
			st := srv.Groups().Status(srv.Now(), nil)
			require.Len(t, st.Groups, 1)
			require.Equal(t, int64(25), st.Groups[0].Offsets[0].Offset)
			require.Equal(t, "meta", st.Groups[0].Offsets[0].Metadata)
			second := saramaConsume(t, addr, ver, 35)
			require.Equal(t, int64(25), second[0].Offset, "resumes at the committed offset")
			var got []string
			for _, m := range append(first, second...) {
				got = append(got, string(m.Value))
			}
			require.Equal(t, want, got)
		})
	}
}

func TestGroupKafkaGoResumeFromCommit(t *testing.T) {
	addr, _, _ := startGroupServer(t, kafka.ProfileModern)
	want := values(60, "v")
	produceValues(t, addr, want)
	read := func(n int) []kafkago.Message {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, Topic: topic, GroupID: "kg",
			MaxWait: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
			RebalanceTimeout: 4 * time.Second, StartOffset: kafkago.FirstOffset, JoinGroupBackoff: 100 * time.Millisecond})
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out []kafkago.Message
		for len(out) < n {
			m, err := r.FetchMessage(ctx)
			require.NoError(t, err, "after %d", len(out))
			out = append(out, m)
			require.NoError(t, r.CommitMessages(ctx, m))
		}
		return out
	}
	first := read(25)
	require.Equal(t, int64(0), first[0].Offset)
	second := read(35)
	require.Equal(t, int64(25), second[0].Offset, "resumes at the committed offset")
	var got []string
	for _, m := range append(first, second...) {
		got = append(got, string(m.Value))
	}
	require.Equal(t, want, got)
}
