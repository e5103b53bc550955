package kafka_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/vdl-project/vdl/internal/clienttest"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

// startGroupServer is startServer with the offsets stream and short group
// session timeouts allowed (takeover tests run in seconds).
func startGroupServer(t *testing.T, profile string) (string, *kafkatest.Backend, *kafka.Server) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().(*net.TCPAddr)
	be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: int32(addr.Port)})
	be.AddStream(topic)
	be.AddStream(kafka.DefaultOffsetsTopic)
	be.SetCommitDelay(2 * time.Millisecond)
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	srv, err := kafka.NewServer(kafka.Config{Profile: profile, ClusterID: "test", GroupMinSessionTimeout: time.Second}, be, log)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, kafka.ErrServerClosed)
	})
	return addr.String(), be, srv
}

func produceValues(t *testing.T, addr string, vals []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v := range vals {
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) { require.NoError(t, err) })
	}
	require.NoError(t, cl.Flush(ctx))
}

func kgoGroupOpts(addr, profile string, balancer kgo.GroupBalancer) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.RebalanceTimeout(4 * time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if balancer != nil {
		opts = append(opts, kgo.Balancers(balancer))
	}
	if profile == kafka.ProfileKafka0102 {
		opts = append(opts, kgo.MaxVersions(kversion.V0_10_2()))
	}
	return opts
}

// pollUntil polls cl until n records arrived (committing after each poll
// when commit is set) and returns their offsets and values.
func pollUntil(t *testing.T, cl *kgo.Client, n int, commit bool) (offs []int64, vals []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(vals) < n {
		fs := cl.PollRecords(ctx, n-len(vals))
		require.NoError(t, ctx.Err(), "got %d of %d records", len(vals), n)
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch error: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			offs = append(offs, r.Offset)
			vals = append(vals, string(r.Value))
		})
		if commit {
			require.NoError(t, cl.CommitUncommittedOffsets(ctx))
		}
	}
	return offs, vals
}

func TestGroupFranzGoResumeFromCommit(t *testing.T) {
	for _, profile := range []string{kafka.ProfileModern, kafka.ProfileKafka0102} {
		for _, bal := range []struct {
			name string
			b    kgo.GroupBalancer
		}{{"cooperative-sticky", nil}, {"range", kgo.RangeBalancer()}} {
			t.Run(profile+"/"+bal.name, func(t *testing.T) {
				addr, _, srv := startGroupServer(t, profile)
				want := values(100, "v")
				produceValues(t, addr, want)

				cl, err := kgo.NewClient(kgoGroupOpts(addr, profile, bal.b)...)
				require.NoError(t, err)
				offs, got := pollUntil(t, cl, 40, true)
				cl.Close() // leaves the group
				require.Equal(t, want[:len(got)], got)
				require.Equal(t, int64(0), offs[0])

				st := srv.Groups().Status(srv.Now(), nil)
				require.Len(t, st.Groups, 1)
				require.Equal(t, "g1", st.Groups[0].Group)
				require.Len(t, st.Groups[0].Offsets, 1)
				require.Equal(t, int64(len(got)), st.Groups[0].Offsets[0].Offset)
				require.Equal(t, int64(100-len(got)), st.Groups[0].Offsets[0].Lag)

				cl2, err := kgo.NewClient(kgoGroupOpts(addr, profile, bal.b)...)
				require.NoError(t, err)
				defer cl2.Close()
				offs2, got2 := pollUntil(t, cl2, 100-len(got), true)
				require.Equal(t, int64(len(got)), offs2[0], "resumes at the committed offset")
				require.Equal(t, want, append(got, got2...))
			})
		}
	}
}

// Two members, one partition: exactly one receives; when it dies (no
// LeaveGroup), the other takes over from the committed offset within the
// session timeout.
func TestGroupFranzGoTakeoverAfterKill(t *testing.T) {
	addr, _, _ := startGroupServer(t, kafka.ProfileModern)
	want := values(60, "v")
	produceValues(t, addr, want[:30])

	opts := kgoGroupOpts(addr, kafka.ProfileModern, kgo.RangeBalancer())
	clienttest.Takeover{
		A: clienttest.NewMember(t, opts...), B: clienttest.NewMember(t, opts...),
		First: 30, Total: 60,
		ProduceRest: func() { produceValues(t, addr, want[30:]) },
		CommitWait:  300 * time.Millisecond,
		Within:      10 * time.Second,
		Timeout:     30 * time.Second,
	}.Run(t)
}
