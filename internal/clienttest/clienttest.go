// Package clienttest holds the Kafka-client test helpers that the kafka
// package's tests (one in-process server) and the integration tests (a
// process cluster) share, so that a scenario run on both is the same code
// with the same assertions. Only tests import it.
package clienttest

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KillableDialer hands out connections that Kill closes at once, after
// which dials fail: a client dialing through it looks dead to the server
// (no LeaveGroup, no more heartbeats), as if its process had died.
type KillableDialer struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

// Dial is a kgo.Dialer function.
func (d *KillableDialer) Dial(ctx context.Context, network, host string) (net.Conn, error) {
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

// Kill closes every connection and fails later dials.
func (d *KillableDialer) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// Member is a group consumer whose connections can be killed.
type Member struct {
	Client *kgo.Client
	Dialer *KillableDialer
}

// NewMember starts a kgo client with opts dialing through a fresh
// KillableDialer; it is closed at the end of the test.
func NewMember(t testing.TB, opts ...kgo.Opt) Member {
	t.Helper()
	d := &KillableDialer{}
	cl, err := kgo.NewClient(append(slices.Clip(opts), kgo.Dialer(d.Dial))...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return Member{Client: cl, Dialer: d}
}

// Takeover is the scenario of a group member that dies without leaving: A
// and B consume one single-partition topic in one group, committing after
// each poll; exactly one of them (the owner) receives the First records
// already in it, at offsets 0..First-1. Then the owner's connections are
// killed, ProduceRest writes the records up to Total, and the other member
// must take over at the committed offset (First) within Within of the kill
// and receive every offset up to Total-1.
type Takeover struct {
	A, B        Member
	First       int
	Total       int
	ProduceRest func()
	// CommitWait is left after the First records for the owner's last
	// commit to go out.
	CommitWait time.Duration
	// Within bounds the takeover: the session timeout plus a rebalance.
	Within time.Duration
	// Timeout bounds the whole scenario.
	Timeout time.Duration
}

// Run runs the scenario.
func (s Takeover) Run(t testing.TB) {
	t.Helper()
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
			fs.EachRecord(func(r *kgo.Record) {
				select {
				case recs <- rec{name, r.Offset}:
				case <-ctx.Done():
				}
			})
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}
	go poll("a", s.A.Client)
	go poll("b", s.B.Client)
	owner := ""
	deadline := time.After(s.Timeout)
	for n := 0; n < s.First; n++ {
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
	time.Sleep(s.CommitWait)
	killed := time.Now()
	map[string]Member{"a": s.A, "b": s.B}[owner].Dialer.Kill()
	s.ProduceRest()
	next := map[string]string{"a": "b", "b": "a"}[owner]
	var first int64 = -1
	for n := s.First; n < s.Total; {
		select {
		case r := <-recs:
			if r.who == owner {
				continue // in flight before the kill
			}
			require.Equal(t, next, r.who)
			if first < 0 {
				first = r.off
				require.Less(t, time.Since(killed), s.Within, "takeover within the session timeout (plus a rebalance)")
			}
			if r.off == int64(n) {
				n++
			}
		case <-deadline:
			t.Fatalf("takeover: only up to %d", n)
		}
	}
	require.Equal(t, int64(s.First), first, "takes over at the committed offset")
}

// ReadPartition reads n messages from pc, a partition consumer started at
// offset 0, asserting offsets 0..n-1 (every value once, in order); an error
// or 30 s without a message fails the test.
func ReadPartition(t testing.TB, pc sarama.PartitionConsumer, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		select {
		case m := <-pc.Messages():
			require.Equal(t, int64(len(got)), m.Offset)
			got = append(got, string(m.Value))
		case err := <-pc.Errors():
			t.Fatalf("consume: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("consume timed out after %d of %d", len(got), n)
		}
	}
	return got
}
