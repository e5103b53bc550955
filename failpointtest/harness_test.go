package failpointtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/proccluster"
	"github.com/vdl-project/vdl/server"
)

// The failpoint build, made in TestMain: every cluster test needs it. The
// production build (proccluster.Production) is made on first use.
var fpBin string

func TestMain(m *testing.M) {
	proccluster.Main(m, func() (err error) {
		fpBin, err = proccluster.Failpoint.Build()
		return err
	})
}

const stream = "s1"

type node = proccluster.Node

// cluster is a proccluster.Cluster with this package's helpers: failpoints,
// a produce-probing leader wait, ledgers.
type cluster struct {
	*proccluster.Cluster
	t testing.TB
}

// startCluster starts three nodes of bin and waits for a serving leader of
// stream. Segments are small (256 KiB) so that rolls and index flushes
// happen within a test.
func startCluster(t testing.TB, bin string) *cluster { return startNodes(t, bin, 3) }

// startNodes starts a cluster of n nodes of bin. A failed test prints the
// last 400 lines of each server log (crashes need the context).
func startNodes(t testing.TB, bin string, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, Cluster: proccluster.Start(t, bin, proccluster.Options{
		Nodes: n, SegmentBytes: 256 << 10, StartTimeout: 30 * time.Second, TailLines: 400})}
	c.waitLeader(30 * time.Second)
	return c
}

// waitCrash waits for the node to die by a failpoint crash: SIGKILL, and
// the crash line failpoints.Crash writes.
func (c *cluster) waitCrash(n *node, timeout time.Duration) {
	c.t.Helper()
	err := c.WaitExit(n.ID, timeout)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		c.t.Fatalf("node %d: exit %v, want SIGKILL", n.ID, err)
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		c.t.Fatalf("node %d: exit %v, want SIGKILL", n.ID, err)
	}
	if !strings.Contains(proccluster.Tail(n.LogPath, 30), "vdl failpoint: crash (SIGKILL)") {
		c.t.Fatalf("node %d died by SIGKILL without the failpoint's crash line", n.ID)
	}
}

// mustStatus returns the node's view of stream.
func (c *cluster) mustStatus(n *node) server.StreamStatus {
	c.t.Helper()
	s, err := c.StreamStatus(n.ID, stream)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// waitLeader waits until the healthy running nodes agree on a leader that
// accepts a produce (a probe record, which the caller's ledger does not
// need: it is never asserted on).
func (c *cluster) waitLeader(timeout time.Duration) *node {
	c.t.Helper()
	id := c.WaitLeaderServing(stream, timeout, func(leader uint64) error {
		cl := c.client(c.Node(leader))
		defer cl.Close()
		if err := produce(cl, "probe"); err != nil {
			return fmt.Errorf("probe produce: %w", err)
		}
		return nil
	})
	return c.Node(id)
}

// followers returns the nodes other than leader.
func (c *cluster) followers(leader *node) []*node {
	var out []*node
	for _, n := range c.Nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

func fp(n *node) *failpoints.Client {
	return &failpoints.Client{BaseURL: n.AdminBase, HTTP: n.AdminClient}
}

func (c *cluster) enable(n *node, name, term string) {
	c.t.Helper()
	if err := fp(n).Enable(name, term); err != nil {
		c.t.Fatalf("node %d: enable %s=%s: %v", n.ID, name, term, err)
	}
}

func (c *cluster) disable(n *node, name string) {
	c.t.Helper()
	if err := fp(n).Disable(name); err != nil {
		c.t.Fatalf("node %d: disable %s: %v", n.ID, name, err)
	}
}

func (c *cluster) hits(n *node, name string) uint64 {
	c.t.Helper()
	in, err := fp(n).Get(name)
	if err != nil {
		c.t.Fatalf("node %d: get %s: %v", n.ID, name, err)
	}
	return in.Hits
}

// client returns a producer seeded with nodes (default: every node): acks
// all, no idempotence, no retries, one request in flight, so every value
// is written to a socket at most once and a failure means "unknown".
func (c *cluster) client(nodes ...*node) *kgo.Client {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.Kafka)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(stream),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(0), kgo.MaxProduceRequestsInflightPerBroker(1), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(4*time.Second), kgo.ProduceRequestTimeout(3*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.DialTimeout(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

func produce(cl *kgo.Client, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr()
}

// ledger records what was acknowledged (must survive everything) and what
// failed (may or may not be in the log).
type ledger struct {
	mu      sync.Mutex
	n       int
	acked   []string
	unknown []string
}

// value makes a unique value of about size bytes (incompressible, so that
// big ones fill segments).
func (l *ledger) value(tag string, size int) string {
	l.mu.Lock()
	l.n++
	n := l.n
	l.mu.Unlock()
	v := fmt.Sprintf("%s-%06d-", tag, n)
	if len(v) < size {
		b := make([]byte, (size-len(v)+1)/2)
		_, _ = rand.Read(b)
		v += hex.EncodeToString(b)[:size-len(v)]
	}
	return v
}

func (l *ledger) produce(cl *kgo.Client, v string) error {
	err := produce(cl, v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.acked = append(l.acked, v)
	} else {
		l.unknown = append(l.unknown, v)
	}
	return err
}

// produceN produces n values of size bytes one after another; it returns
// how many were acknowledged.
func (c *cluster) produceN(l *ledger, cl *kgo.Client, tag string, n, size int) int {
	ok := 0
	for range n {
		if l.produce(cl, l.value(tag, size)) == nil {
			ok++
		}
	}
	return ok
}

// readAll reads the stream from offset 0 to the leader's high watermark.
func (c *cluster) readAll(leader *node) []string {
	c.t.Helper()
	hwm := c.mustStatus(leader).HighWatermark
	cl, err := kgo.NewClient(kgo.SeedBrokers(leader.Kafka),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for int64(len(out)) < hwm {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			c.t.Fatalf("read %d of %d records: %v", len(out), hwm, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { c.t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(len(out)) {
				c.t.Fatalf("record at offset %d after %d records", r.Offset, len(out))
			}
			out = append(out, string(r.Value))
		})
	}
	return out
}

// checkNoAckedLoss reads the whole stream and checks that every
// acknowledged value is in it, once. It returns the values read.
func (c *cluster) checkNoAckedLoss(l *ledger) []string {
	c.t.Helper()
	leader := c.waitLeader(30 * time.Second)
	got := c.readAll(leader)
	count := map[string]int{}
	for _, v := range got {
		count[v]++
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.acked {
		switch count[v] {
		case 1:
		case 0:
			c.t.Errorf("acknowledged value %.20s… is missing", v)
		default:
			c.t.Errorf("value %.20s… is in the log %d times", v, count[v])
		}
	}
	c.t.Logf("final read: %d records; %d acknowledged, %d unknown produces", len(got), len(l.acked), len(l.unknown))
	return got
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cond()
}
