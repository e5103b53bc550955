package failpointtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/server"
)

// Binaries, built once per test binary run: the failpoint build in TestMain
// (every cluster test needs it), the production build on first use.
var (
	binDir  string
	fpBin   string // scripts/build-failpoint.sh ./cmd/vdl
	prodBin string // go build ./cmd/vdl
	prodErr error
	prodOne sync.Once
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vdl-fptest-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := 1
	cmd := exec.Command("scripts/build-failpoint.sh", filepath.Join(dir, "failpoint"), "./cmd/vdl")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "failpoint build of ./cmd/vdl: %v\n%s", err, out)
	} else {
		fpBin = filepath.Join(dir, "failpoint", "vdl")
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// productionBinary builds the production vdl (plain go build, as make build).
func productionBinary(tb testing.TB) string {
	tb.Helper()
	prodOne.Do(func() { prodBin, prodErr = goBuild("..", filepath.Join(binDir, "production")) })
	if prodErr != nil {
		tb.Fatal(prodErr)
	}
	return prodBin
}

// goBuild builds ./cmd/vdl of the module in srcDir into outDir.
func goBuild(srcDir, outDir string) (string, error) {
	cmd := exec.Command("go", "build", "-o", filepath.Join(outDir, "vdl"), "./cmd/vdl")
	cmd.Dir = srcDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/vdl in %s: %v\n%s", srcDir, err, out)
	}
	return filepath.Join(outDir, "vdl"), nil
}

const stream = "s1"

// node is one server process.
type node struct {
	id                 uint64
	kafka, raft, admin string
	config, data, log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	starts  int
}

// cluster is three `vdl server` processes of one binary.
type cluster struct {
	t     testing.TB
	bin   string
	dir   string
	nodes []*node
}

// startCluster starts three nodes of bin and waits for a serving leader of
// stream. Segments are small (256 KiB) so that rolls and index flushes
// happen within a test.
func startCluster(t testing.TB, bin string) *cluster { return startNodes(t, bin, 3) }

// startNodes starts a cluster of n nodes of bin.
func startNodes(t testing.TB, bin string, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: bin, dir: t.TempDir()}
	ports := freePorts(t, 3*n)
	for i := range n {
		id := uint64(i + 1)
		c.nodes = append(c.nodes, &node{
			id:     id,
			kafka:  fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			raft:   fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			admin:  fmt.Sprintf("127.0.0.1:%d", ports[3*i+2]),
			config: filepath.Join(c.dir, fmt.Sprintf("node%d.toml", id)),
			data:   filepath.Join(c.dir, fmt.Sprintf("node%d", id)),
			log:    filepath.Join(c.dir, fmt.Sprintf("node%d.log", id)),
		})
	}
	for _, n := range c.nodes {
		if err := os.WriteFile(n.config, []byte(c.configFor(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.report)
	t.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitHealthy(n, 30*time.Second)
	}
	c.waitLeader(30 * time.Second)
	return c
}

func (c *cluster) configFor(n *node) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "node_id = %d\ncluster_id = \"vdl-fp\"\ndata_dir = %q\n", n.id, n.data)
	fmt.Fprintf(&sb, "kafka_listen = %q\nraft_listen = %q\nadmin_listen = %q\n\n", n.kafka, n.raft, n.admin)
	sb.WriteString("[raft]\ntick_ms = 50\n\n[storage]\nsegment_bytes = 262144\n\n[log]\nlevel = \"info\"\n\n")
	for _, p := range c.nodes {
		fmt.Fprintf(&sb, "[[peers]]\nid = %d\nraft = %q\nkafka = %q\nadmin = %q\n\n", p.id, p.raft, p.kafka, p.admin)
	}
	fmt.Fprintf(&sb, "[[streams]]\nname = %q\nid = 1\n", stream)
	return sb.String()
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// start runs the node's process (env: extra environment, e.g. GO_FAILPOINTS).
func (c *cluster) start(n *node, env ...string) {
	c.t.Helper()
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.starts++
	fmt.Fprintf(logf, "=== test: start #%d of node %d %v ===\n", n.starts, n.id, env)
	cmd := exec.Command(c.bin, "server", "--config", n.config)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start node %d: %v", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.waitErr = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(exited)
	}()
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// waitExit waits for the node's process to end and returns its wait error.
func (c *cluster) waitExit(n *node, timeout time.Duration) error {
	c.t.Helper()
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(timeout):
		c.t.Fatalf("node %d did not exit within %s", n.id, timeout)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.waitErr
}

// waitCrash waits for the node to die by a failpoint crash: SIGKILL, and
// the crash line failpoints.Crash writes.
func (c *cluster) waitCrash(n *node, timeout time.Duration) {
	c.t.Helper()
	err := c.waitExit(n, timeout)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		c.t.Fatalf("node %d: exit %v, want SIGKILL", n.id, err)
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		c.t.Fatalf("node %d: exit %v, want SIGKILL", n.id, err)
	}
	if !strings.Contains(tail(n.log, 30), "vdl failpoint: crash (SIGKILL)") {
		c.t.Fatalf("node %d died by SIGKILL without the failpoint's crash line", n.id)
	}
}

func (c *cluster) kill(n *node) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// restart starts a dead node again and waits for it to be healthy.
func (c *cluster) restart(n *node) {
	c.t.Helper()
	if n.running() {
		c.t.Fatalf("node %d is running", n.id)
	}
	c.start(n)
	c.waitHealthy(n, 30*time.Second)
}

func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			n.mu.Lock()
			cmd, exited := n.cmd, n.exited
			n.mu.Unlock()
			if cmd == nil {
				return
			}
			select {
			case <-exited:
				return
			default:
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	wg.Wait()
}

func (c *cluster) report() {
	if !c.t.Failed() {
		return
	}
	for _, n := range c.nodes {
		c.t.Logf("---- tail of %s ----\n%s", n.log, tail(n.log, 400))
	}
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

var httpc = &http.Client{Timeout: 3 * time.Second}

// health returns the node's GET /health status code (0: no answer).
func health(n *node) int {
	resp, err := httpc.Get("http://" + n.admin + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (c *cluster) waitHealthy(n *node, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !n.running() {
			c.t.Fatalf("node %d exited while waiting for /health", n.id)
		}
		if health(n) == http.StatusOK {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("node %d not healthy after %s", n.id, timeout)
}

// status returns the node's view of stream.
func status(n *node) (server.StreamStatus, error) {
	resp, err := httpc.Get("http://" + n.admin + "/status")
	if err != nil {
		return server.StreamStatus{}, err
	}
	defer resp.Body.Close()
	var st server.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return server.StreamStatus{}, err
	}
	for _, s := range st.Streams {
		if s.Name == stream {
			return s, nil
		}
	}
	return server.StreamStatus{}, fmt.Errorf("node %d: no stream %q", n.id, stream)
}

func (c *cluster) mustStatus(n *node) server.StreamStatus {
	c.t.Helper()
	s, err := status(n)
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
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		var leader uint64
		agree := true
		for _, n := range c.nodes {
			if !n.running() || health(n) != http.StatusOK {
				continue
			}
			s, err := status(n)
			if err != nil || s.Leader == 0 || (leader != 0 && s.Leader != leader) {
				agree, why = false, fmt.Sprintf("node %d: leader %d err %v", n.id, s.Leader, err)
				break
			}
			leader = s.Leader
		}
		if agree && leader != 0 {
			l := c.node(leader)
			if s, err := status(l); err == nil && s.Role == "StateLeader" && l.running() {
				cl := c.client(l)
				err := produce(cl, "probe")
				cl.Close()
				if err == nil {
					return l
				}
				why = "probe produce: " + err.Error()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("no serving leader after %s (%s)", timeout, why)
	return nil
}

func (c *cluster) node(id uint64) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %d", id)
	return nil
}

// followers returns the nodes other than leader.
func (c *cluster) followers(leader *node) []*node {
	var out []*node
	for _, n := range c.nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

func fp(n *node) *failpoints.Client { return &failpoints.Client{BaseURL: n.admin} }

func (c *cluster) enable(n *node, name, term string) {
	c.t.Helper()
	if err := fp(n).Enable(name, term); err != nil {
		c.t.Fatalf("node %d: enable %s=%s: %v", n.id, name, term, err)
	}
}

func (c *cluster) disable(n *node, name string) {
	c.t.Helper()
	if err := fp(n).Disable(name); err != nil {
		c.t.Fatalf("node %d: disable %s: %v", n.id, name, err)
	}
}

func (c *cluster) hits(n *node, name string) uint64 {
	c.t.Helper()
	in, err := fp(n).Get(name)
	if err != nil {
		c.t.Fatalf("node %d: get %s: %v", n.id, name, err)
	}
	return in.Hits
}

// client returns a producer seeded with nodes (default: every node): acks
// all, no idempotence, no retries, one request in flight, so every value
// is written to a socket at most once and a failure means "unknown".
func (c *cluster) client(nodes ...*node) *kgo.Client {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.kafka)
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(leader.kafka),
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
