package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

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

// killableDialer hands out connections that kill() closes at once, after
// which dials fail: the client looks dead to the server (no LeaveGroup).
type killableDialer struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

func (d *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("killed")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		_ = c.Close()
	}
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

	dA, dB := &killableDialer{}, &killableDialer{}
	a, err := kgo.NewClient(append(kgoGroupOpts(addr, kafka.ProfileModern, kgo.RangeBalancer()), kgo.Dialer(dA.dial))...)
	require.NoError(t, err)
	defer a.Close()
	b, err := kgo.NewClient(append(kgoGroupOpts(addr, kafka.ProfileModern, kgo.RangeBalancer()), kgo.Dialer(dB.dial))...)
	require.NoError(t, err)
	defer b.Close()

	// Poll both until the 30 records arrived; exactly one of them gets any.
	type rec struct {
		who string
		off int64
	}
	recs := make(chan rec, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poll := func(name string, cl *kgo.Client) {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) { recs <- rec{name, r.Offset} })
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}
	go poll("a", a)
	go poll("b", b)
	owner := ""
	deadline := time.After(30 * time.Second)
	for n := 0; n < 30; n++ {
		select {
		case r := <-recs:
			if owner == "" {
				owner = r.who
			}
			require.Equal(t, owner, r.who, "one partition: one consumer")
			require.Equal(t, int64(n), r.off)
		case <-deadline:
			t.Fatalf("only %d records", n)
		}
	}
	time.Sleep(300 * time.Millisecond) // let the last commit go out
	killed := time.Now()
	if owner == "a" {
		dA.kill()
	} else {
		dB.kill()
	}
	produceValues(t, addr, want[30:])
	next := map[string]string{"a": "b", "b": "a"}[owner]
	var first int64 = -1
	for n := 30; n < 60; {
		select {
		case r := <-recs:
			if r.who == owner {
				continue // in flight before the kill
			}
			require.Equal(t, next, r.who)
			if first < 0 {
				first = r.off
				require.Less(t, time.Since(killed), 10*time.Second)
			}
			if r.off == int64(n) {
				n++
			}
		case <-deadline:
			t.Fatalf("takeover: only up to %d", n)
		}
	}
	require.Equal(t, int64(30), first, "takes over at the committed offset")
}
