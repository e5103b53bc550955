package integration

// The cluster harness: builds ./cmd/vdl once per test binary, starts three
// `vdl server` processes on 127.0.0.1 with free ports, waits for health and a
// serving leader, kills (SIGKILL) and restarts nodes on the same config and
// data dir, and keeps every server's output in the test's temp dir (the tail
// is printed when the test fails).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/server"
)

var (
	buildOnce sync.Once
	buildDir  string
	vdlBin    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// vdlBinary builds ./cmd/vdl on first use (once per test binary run).
func vdlBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "vdl-integration-bin-")
		if buildErr != nil {
			return
		}
		goTool := "go"
		if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
			goTool = p
		}
		vdlBin = filepath.Join(buildDir, "vdl")
		cmd := exec.Command(goTool, "build", "-o", vdlBin, "github.com/vdl-project/vdl/cmd/vdl")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/vdl: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return vdlBin
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Options shape a test cluster.
type Options struct {
	Profile        string   // "modern" (default) or "kafka-0.10"
	Streams        []string // default ["s1"]; ids 1, 2, ...
	TickMillis     int      // default 50 (election after 10-20 ticks)
	TailCacheBytes int64    // default: the server's (8 MiB)
	LogLevel       string   // default "info"
	Dir            string   // default tb.TempDir()
}

// Node is one server process.
type Node struct {
	ID                 uint64
	Kafka, Raft, Admin string
	ConfigPath         string
	DataDir            string
	LogPath            string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	expected bool // the harness stopped or killed it
	starts   int
}

// Cluster is three server processes.
type Cluster struct {
	tb    testing.TB
	opts  Options
	Dir   string
	Nodes []*Node
	bin   string

	mu         sync.Mutex
	unexpected []string // nodes that exited without the harness asking
}

// StartCluster starts a 3-node cluster and waits until every stream has a
// leader that serves Kafka requests. Everything is stopped at the end of the
// test; the servers' logs stay in the cluster dir and their tails are printed
// if the test failed.
func StartCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	bin := vdlBinary(tb)
	if opts.Profile == "" {
		opts.Profile = "modern"
	}
	if len(opts.Streams) == 0 {
		opts.Streams = []string{"s1"}
	}
	if opts.TickMillis == 0 {
		opts.TickMillis = 50
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{tb: tb, opts: opts, Dir: opts.Dir, bin: bin}
	ports := freePorts(tb, 9)
	for i := 0; i < 3; i++ {
		id := uint64(i + 1)
		c.Nodes = append(c.Nodes, &Node{
			ID:         id,
			Kafka:      fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			Raft:       fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			Admin:      fmt.Sprintf("127.0.0.1:%d", ports[3*i+2]),
			ConfigPath: filepath.Join(c.Dir, fmt.Sprintf("node%d.toml", id)),
			DataDir:    filepath.Join(c.Dir, fmt.Sprintf("node%d", id)),
			LogPath:    filepath.Join(c.Dir, fmt.Sprintf("node%d.log", id)),
		})
	}
	for _, n := range c.Nodes {
		if err := os.WriteFile(n.ConfigPath, []byte(c.config(n)), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	// Cleanups run last-in first-out: stop the processes, then report.
	tb.Cleanup(c.report)
	tb.Cleanup(c.stopAll)
	for _, n := range c.Nodes {
		c.start(n)
	}
	for _, n := range c.Nodes {
		c.WaitHealthy(n.ID, 20*time.Second)
	}
	for _, s := range opts.Streams {
		c.WaitLeader(s, 20*time.Second)
	}
	return c
}

func (c *Cluster) config(n *Node) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "node_id = %d\ncluster_id = \"vdl-it\"\ndata_dir = %q\nprofile = %q\n", n.ID, n.DataDir, c.opts.Profile)
	fmt.Fprintf(&sb, "kafka_listen = %q\nraft_listen = %q\nadmin_listen = %q\n\n", n.Kafka, n.Raft, n.Admin)
	fmt.Fprintf(&sb, "[raft]\ntick_ms = %d\n\n", c.opts.TickMillis)
	if c.opts.TailCacheBytes > 0 {
		fmt.Fprintf(&sb, "[storage]\ntail_cache_bytes = %d\n\n", c.opts.TailCacheBytes)
	}
	fmt.Fprintf(&sb, "[log]\nlevel = %q\n\n", c.opts.LogLevel)
	for _, p := range c.Nodes {
		fmt.Fprintf(&sb, "[[peers]]\nid = %d\nraft = %q\nkafka = %q\n\n", p.ID, p.Raft, p.Kafka)
	}
	for i, s := range c.opts.Streams {
		fmt.Fprintf(&sb, "[[streams]]\nname = %q\nid = %d\n\n", s, i+1)
	}
	return sb.String()
}

// freePorts picks n distinct free TCP ports by listening on :0 (all held
// open until every port is picked, so they are distinct), then closing.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func (c *Cluster) start(n *Node) {
	c.tb.Helper()
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.tb.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.starts++
	fmt.Fprintf(logf, "=== harness: start #%d of node %d at %s ===\n", n.starts, n.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "server", "--config", n.ConfigPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.tb.Fatalf("start node %d: %v", n.ID, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.expected, n.waitErr = cmd, exited, false, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.waitErr = err
		expected := n.expected
		n.mu.Unlock()
		if !expected {
			c.mu.Lock()
			c.unexpected = append(c.unexpected, fmt.Sprintf("node %d exited unexpectedly: %v", n.ID, err))
			c.mu.Unlock()
		}
		close(exited)
	}()
}

// Node returns the node with id.
func (c *Cluster) Node(id uint64) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.tb.Fatalf("no node %d", id)
	return nil
}

// Running reports whether the node's process is running.
func (n *Node) Running() bool {
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

// Kill sends SIGKILL to a node and waits for the process to be gone.
func (c *Cluster) Kill(id uint64) {
	c.tb.Helper()
	n := c.Node(id)
	n.mu.Lock()
	n.expected = true
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
	c.tb.Logf("killed node %d (kill -9)", id)
}

// Restart starts a stopped or killed node again on the same config and data dir.
func (c *Cluster) Restart(id uint64) {
	c.tb.Helper()
	n := c.Node(id)
	if n.Running() {
		c.tb.Fatalf("node %d is running", id)
	}
	c.start(n)
	c.WaitHealthy(id, 20*time.Second)
	c.tb.Logf("restarted node %d", id)
}

// stop ends a node with SIGTERM (graceful), SIGKILL after a grace period; a
// node that needs the SIGKILL is reported as a hang.
func (c *Cluster) stop(n *Node) {
	n.mu.Lock()
	n.expected = true
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
	case <-time.After(15 * time.Second):
		c.tb.Errorf("node %d did not stop within 15s of SIGTERM (hang); killing it", n.ID)
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(n) }()
	}
	wg.Wait()
}

// report fails the test for nodes that died on their own and, if the test
// failed, prints the tail of every server log.
func (c *Cluster) report() {
	c.mu.Lock()
	for _, u := range c.unexpected {
		c.tb.Error(u)
	}
	c.mu.Unlock()
	if !c.tb.Failed() {
		return
	}
	// The temp dir goes away with the test: keep the whole logs elsewhere.
	keep, err := os.MkdirTemp("", "vdl-integration-logs-")
	for _, n := range c.Nodes {
		c.tb.Logf("---- tail of %s ----\n%s", n.LogPath, tail(n.LogPath, 40))
		if err == nil {
			if data, rerr := os.ReadFile(n.LogPath); rerr == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(n.LogPath)), data, 0o644)
			}
		}
	}
	if err == nil {
		c.tb.Logf("server logs kept in %s", keep)
	}
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var ls []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ls = append(ls, sc.Text())
		if len(ls) > lines {
			ls = ls[1:]
		}
	}
	return strings.Join(ls, "\n")
}

// KafkaAddrs lists the Kafka addresses of every node (seed brokers).
func (c *Cluster) KafkaAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Kafka)
	}
	return out
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// Status fetches GET /status of a node.
func (c *Cluster) Status(id uint64) (server.Status, error) {
	var st server.Status
	resp, err := httpClient.Get("http://" + c.Node(id).Admin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// StreamStatus is one stream's entry in a node's /status.
func (c *Cluster) StreamStatus(id uint64, stream string) (server.StreamStatus, error) {
	st, err := c.Status(id)
	if err != nil {
		return server.StreamStatus{}, err
	}
	for _, s := range st.Streams {
		if s.Name == stream {
			return s, nil
		}
	}
	return server.StreamStatus{}, fmt.Errorf("node %d: no stream %q", id, stream)
}

// WaitHealthy waits for GET /health to answer 200.
func (c *Cluster) WaitHealthy(id uint64, timeout time.Duration) {
	c.tb.Helper()
	n := c.Node(id)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !n.Running() {
			c.tb.Fatalf("node %d exited while waiting for /health", id)
		}
		resp, err := httpClient.Get("http://" + n.Admin + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = errors.New(resp.Status)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("node %d not healthy after %s: %v", id, timeout, last)
}

// WaitLeader waits until every running node agrees on the stream's leader,
// the leader reports itself as leader, and the leader's Kafka listener names
// itself as the partition leader (a leader serves only once it applied an
// entry of its own term; before, Metadata says LEADER_NOT_AVAILABLE).
func (c *Cluster) WaitLeader(stream string, timeout time.Duration) uint64 {
	c.tb.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		leader, reason := c.agreedLeader(stream)
		if leader != 0 {
			if err := c.kafkaLeaderIs(stream, leader); err == nil {
				return leader
			} else {
				reason = err.Error()
			}
		}
		why = reason
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("stream %q: no serving leader after %s (%s)", stream, timeout, why)
	return 0
}

func (c *Cluster) agreedLeader(stream string) (uint64, string) {
	var leader uint64
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		s, err := c.StreamStatus(n.ID, stream)
		if err != nil {
			return 0, err.Error()
		}
		if s.Leader == 0 {
			return 0, fmt.Sprintf("node %d sees no leader", n.ID)
		}
		if leader != 0 && s.Leader != leader {
			return 0, fmt.Sprintf("nodes disagree: %d vs %d", leader, s.Leader)
		}
		leader = s.Leader
	}
	if leader == 0 {
		return 0, "no running node"
	}
	if !c.Node(leader).Running() {
		return 0, fmt.Sprintf("leader %d is not running", leader)
	}
	s, err := c.StreamStatus(leader, stream)
	if err != nil {
		return 0, err.Error()
	}
	if s.Role != "StateLeader" {
		return 0, fmt.Sprintf("node %d is %s", leader, s.Role)
	}
	return leader, ""
}

// kafkaLeaderIs asks the leader's own Kafka listener for the stream's metadata.
func (c *Cluster) kafkaLeaderIs(stream string, leader uint64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Node(leader).Kafka))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(stream)
	req.Topics = append(req.Topics, rt)
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return errors.New("no seed broker")
	}
	kr, err := seeds[0].Request(ctx, req) // this node's own view
	if err != nil {
		return err
	}
	resp := kr.(*kmsg.MetadataResponse)
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != stream {
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition == 0 && p.ErrorCode == 0 && p.Leader == int32(leader) {
				return nil
			}
			return fmt.Errorf("metadata from node %d: partition leader %d error %d", leader, p.Leader, p.ErrorCode)
		}
	}
	return fmt.Errorf("metadata from node %d: no stream %q", leader, stream)
}

// CPUSeconds is the user+system CPU time the node's process has used so far
// (Linux /proc; 0 elsewhere or when it is not running).
func (n *Node) CPUSeconds() float64 {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the ")" that ends the command name; utime and stime are
	// fields 14 and 15 of the line, in clock ticks (USER_HZ = 100 on Linux).
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	var ut, st float64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return (ut + st) / 100
}

// RestartAll stops every node gracefully (SIGTERM), rewrites the configs
// with profile (empty: unchanged), starts them all again on the same data
// dirs and waits for health and serving leaders.
func (c *Cluster) RestartAll(profile string) {
	c.tb.Helper()
	c.stopAll()
	if profile != "" {
		c.opts.Profile = profile
	}
	for _, n := range c.Nodes {
		if err := os.WriteFile(n.ConfigPath, []byte(c.config(n)), 0o644); err != nil {
			c.tb.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		c.start(n)
	}
	for _, n := range c.Nodes {
		c.WaitHealthy(n.ID, 20*time.Second)
	}
	for _, s := range c.opts.Streams {
		c.WaitLeader(s, 20*time.Second)
	}
	c.tb.Logf("restarted every node (profile %s)", c.opts.Profile)
}
