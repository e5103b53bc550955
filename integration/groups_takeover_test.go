package integration

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// killableDialer hands out connections that kill() closes at once, after
// which dials fail: the client looks dead to the cluster (no LeaveGroup).
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

// TestGroupTakeoverOnCluster: two members of one group on a real 3-node
// cluster; exactly one receives (one partition); when it dies without
// leaving, the other takes over from the committed offset within the
// session timeout.
func TestGroupTakeoverOnCluster(t *testing.T) {
	c := StartCluster(t, Options{})
	c.WaitLeader("s1", 20*time.Second)
	want := values(60, "to-")
	produceValues(t, c, want[:30])
	opts := func(d *killableDialer) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...), kgo.ConsumerGroup("takeover"), kgo.ConsumeTopics("s1"),
			kgo.DisableAutoCommit(), kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond), // 6 s: the broker minimum, as Kafka's
			kgo.RebalanceTimeout(5 * time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.Balancers(kgo.RangeBalancer()), kgo.Dialer(d.dial)}
	}
	dA, dB := &killableDialer{}, &killableDialer{}
	a, err := kgo.NewClient(opts(dA)...)
	require.NoError(t, err)
	defer a.Close()
	b, err := kgo.NewClient(opts(dB)...)
	require.NoError(t, err)
	defer b.Close()

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
	deadline := time.After(60 * time.Second)
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
	time.Sleep(500 * time.Millisecond) // let the last commit go out
	killed := time.Now()
	map[string]*killableDialer{"a": dA, "b": dB}[owner].kill()
	produceValues(t, c, want[30:])
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
				require.Less(t, time.Since(killed), 20*time.Second, "takeover within the session timeout (plus a rebalance)")
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
