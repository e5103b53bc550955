// Package proccluster runs VDL clusters of real `vdl server` processes on
// 127.0.0.1 for the integration and failpoint tests, which share it so that
// both exercise the server the same way: it builds ./cmd/vdl (production or
// failpoint build) once per test binary, writes each node's TOML config on
// free ports, starts, kills (SIGKILL), stops (SIGTERM) and restarts the
// processes on the same config and data dir, waits for health and serving
// leaders, and keeps every server's output in a log file whose tail is
// printed when the test fails.
//
// It is a non-test package only so that both test packages can import it;
// nothing but tests uses it.
package proccluster

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/internal/testnet"
)

// T is what a cluster needs of its caller: a testing.TB, or a command's
// stand-in for one (the campaign runner, jepsen-like/).
type T interface {
	Helper()
	Logf(format string, args ...any)
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
}

// Options shape a test cluster.
type Options struct {
	Nodes          int      // default 3
	Profile        string   // "modern" (default) or "kafka-0.10"
	Streams        []string // default ["s1"]; ids 1, 2, ...
	TickMillis     int      // default 50 (election after 10-20 ticks)
	SegmentBytes   int64    // default: the server's
	TailCacheBytes int64    // default: the server's (a fraction of memory)
	// CatchUpReadBytes, CatchUpReadBytesPerSec: the servers' catch-up
	// read budget (storage.catchup_read_bytes, _per_sec); 0: the default.
	CatchUpReadBytes, CatchUpReadBytesPerSec int64
	CatchUpReadsNoYield                      bool   // catchup_reads_no_yield
	ReservedBytes                            int64  // the data dir's space reserve; default: the server's
	LogLevel                                 string // default "info"
	Dir                                      string // default tb.TempDir()
	// StartTimeout bounds each wait of Start, Restart and RestartAll: for a
	// node's /health, for a stream's serving leader. Default 20s.
	StartTimeout time.Duration
	// TailLines of each server log are printed when the test failed (the
	// whole logs are kept in a temp dir). Default 40.
	TailLines int
	// Env is added to every server process's environment (VDL_CANARY for
	// the Canary build, say).
	Env []string
	// Hosts are the nodes' listen hosts, node i+1's at i (default
	// 127.0.0.1): the campaigns' network namespaces give each server its
	// own address.
	Hosts []string
	// Wrap, when set, is the command a node's process runs under (its
	// arguments come after): ["ip", "netns", "exec", NAME] starts it in a
	// network namespace. The wrapper must exec the server (same pid), so
	// that kill, SIGSTOP and SIGCONT reach it.
	Wrap func(id uint64) []string
	// DataDirs are the nodes' data dirs, node i+1's at i (default
	// Dir/node<id>): the campaigns put each on a size-limited filesystem.
	DataDirs []string
	// ConfigServers (3, say) runs the control plane: that many config
	// server processes, the servers registering with them, the streams
	// created through them (configservers.go). 0: static configs.
	ConfigServers int
	// ConfigServerHosts are the config servers' listen hosts (default
	// 127.0.0.1), config server k's at k-1.
	ConfigServerHosts []string
	// DCs are the servers' dc labels, node i+1's at i (config servers).
	DCs []string
	// PreferredDCs are the streams' preferred DCs, stream i's at i
	// (config servers: the balancer moves a leader back there).
	PreferredDCs []string
	// BalanceAfterMillis is the config servers' balance_after_ms (0: theirs).
	BalanceAfterMillis int
}

// Node is one server process.
type Node struct {
	ID                 uint64
	Kafka, Raft, Admin string
	// KafkaTLS is the Kafka TLS listener: its clients authenticate with
	// SASL as Cluster.User (docs/security.md).
	KafkaTLS   string
	ConfigPath string
	DataDir    string
	LogPath    string
	// AdminBase is the admin API's base URL (HTTPS); AdminClient trusts
	// the cluster CA and sends the admin token.
	AdminBase   string
	AdminClient *http.Client

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	expected bool // the harness stopped or killed it, or the test waits for its exit
	starts   int
	joining  bool // its config says initial_cluster_state = "existing"
}

func (n *Node) initialState() string {
	if n.joining {
		return "existing"
	}
	return "new"
}

// Cluster is the server processes of one test. The servers run secured as
// in production (docs/security.md): peers on mutual TLS, the admin API on
// HTTPS with a token; the certificates and token are in Certs.
type Cluster struct {
	Dir   string
	Nodes []*Node
	// ConfigServers are the config servers' processes (Options.ConfigServers).
	ConfigServers []*Node
	Certs         string
	// User and Password are a SASL user of the Kafka TLS listeners (every
	// mechanism); the users file is Certs/users.toml.
	User, Password string

	tb   T
	opts Options
	bin  string

	mu         sync.Mutex
	unexpected []exit // processes that ended without the harness or the test asking
}

type exit struct {
	id    uint64
	start int
	msg   string
}

// Start starts a cluster of bin and waits until every stream has a leader
// that serves Kafka requests. Everything is stopped at the end of the test;
// a process that died on its own (not by Kill, a stop, or an exit the test
// waited for with WaitExit) or hung on SIGTERM fails the test.
func Start(tb T, bin string, opts Options) *Cluster {
	tb.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
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
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 20 * time.Second
	}
	if opts.TailLines == 0 {
		opts.TailLines = 40
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{tb: tb, opts: opts, Dir: opts.Dir, bin: bin, Certs: filepath.Join(opts.Dir, "certs"),
		User: "vdl-test", Password: "vdl-test-password"}
	const perNode = 4
	ports := freePorts(tb, perNode*opts.Nodes)
	var ids []uint64
	for i := range opts.Nodes {
		ids = append(ids, uint64(i+1))
	}
	host := func(i int) string {
		if i < len(opts.Hosts) && opts.Hosts[i] != "" {
			return opts.Hosts[i]
		}
		return "127.0.0.1"
	}
	sans := []string{"127.0.0.1", "localhost"}
	for i := range opts.Nodes {
		if h := host(i); !slices.Contains(sans, h) {
			sans = append(sans, h)
		}
	}
	var csIDs []uint64
	csHost := func(k int) string {
		if k-1 < len(opts.ConfigServerHosts) && opts.ConfigServerHosts[k-1] != "" {
			return opts.ConfigServerHosts[k-1]
		}
		return "127.0.0.1"
	}
	for k := 1; k <= opts.ConfigServers; k++ {
		csIDs = append(csIDs, uint64(k))
		if h := csHost(k); !slices.Contains(sans, h) {
			sans = append(sans, h)
		}
	}
	if err := pki.EnsureDir(c.Certs, "vdl-test", ids, csIDs, sans, []string{"admin"}); err != nil {
		tb.Fatal(err)
	}
	if _, err := pki.EnsureToken(filepath.Join(c.Certs, "admin.token")); err != nil {
		tb.Fatal(err)
	}
	if err := c.writeUsers(); err != nil {
		tb.Fatal(err)
	}
	admin, err := c.adminHTTP()
	if err != nil {
		tb.Fatal(err)
	}
	for i := range opts.Nodes {
		id := uint64(i + 1)
		h := host(i)
		c.Nodes = append(c.Nodes, &Node{
			ID:          id,
			Kafka:       net.JoinHostPort(h, strconv.Itoa(ports[perNode*i])),
			Raft:        net.JoinHostPort(h, strconv.Itoa(ports[perNode*i+1])),
			Admin:       net.JoinHostPort(h, strconv.Itoa(ports[perNode*i+2])),
			KafkaTLS:    net.JoinHostPort(h, strconv.Itoa(ports[perNode*i+3])),
			ConfigPath:  filepath.Join(c.Dir, fmt.Sprintf("node%d.toml", id)),
			DataDir:     dataDir(opts, c.Dir, i),
			LogPath:     filepath.Join(c.Dir, fmt.Sprintf("node%d.log", id)),
			AdminBase:   "https://" + net.JoinHostPort(h, strconv.Itoa(ports[perNode*i+2])),
			AdminClient: admin,
		})
	}
	if opts.ConfigServers > 0 {
		c.addConfigServers(freePorts(tb, 2*opts.ConfigServers), csHost)
	}
	c.writeConfigs()
	// Cleanups run last-in first-out: stop the processes, then report.
	tb.Cleanup(c.report)
	tb.Cleanup(c.stopConfigServers)
	tb.Cleanup(c.StopAll)
	c.startAll()
	return c
}

func dataDir(opts Options, dir string, i int) string {
	if i < len(opts.DataDirs) && opts.DataDirs[i] != "" {
		return opts.DataDirs[i]
	}
	return filepath.Join(dir, fmt.Sprintf("node%d", i+1))
}

func (c *Cluster) writeConfigs() {
	c.tb.Helper()
	for _, n := range c.Nodes {
		if err := os.WriteFile(n.ConfigPath, []byte(c.config(n)), 0o644); err != nil {
			c.tb.Fatal(err)
		}
	}
}

func (c *Cluster) config(n *Node) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "node_id = %d\ncluster_id = \"vdl-test\"\ndata_dir = %q\nprofile = %q\n", n.ID, n.DataDir, c.opts.Profile)
	fmt.Fprintf(&sb, "initial_cluster_state = %q\n", n.initialState())
	fmt.Fprintf(&sb, "kafka_listen = %q\nkafka_tls_listen = %q\nraft_listen = %q\nadmin_listen = %q\n\n", n.Kafka, n.KafkaTLS, n.Raft, n.Admin)
	cert := func(f string) string { return filepath.Join(c.Certs, f) }
	fmt.Fprintf(&sb, "[tls]\nca_file = %q\ncert_file = %q\nkey_file = %q\n\n", cert("ca.crt"),
		cert(fmt.Sprintf("node%d.crt", n.ID)), cert(fmt.Sprintf("node%d.key", n.ID)))
	fmt.Fprintf(&sb, "[admin]\ntoken_file = %q\n\n", cert("admin.token"))
	fmt.Fprintf(&sb, "[sasl]\nusers_file = %q\n\n", cert("users.toml"))
	fmt.Fprintf(&sb, "[raft]\ntick_ms = %d\n\n", c.opts.TickMillis)
	if c.opts.SegmentBytes > 0 || c.opts.TailCacheBytes > 0 || c.opts.ReservedBytes != 0 ||
		c.opts.CatchUpReadBytes > 0 || c.opts.CatchUpReadBytesPerSec > 0 || c.opts.CatchUpReadsNoYield {
		sb.WriteString("[storage]\n")
		if c.opts.SegmentBytes > 0 {
			fmt.Fprintf(&sb, "segment_bytes = %d\n", c.opts.SegmentBytes)
		}
		if c.opts.TailCacheBytes > 0 {
			fmt.Fprintf(&sb, "tail_cache_bytes = %d\n", c.opts.TailCacheBytes)
		}
		if c.opts.ReservedBytes != 0 {
			fmt.Fprintf(&sb, "reserved_bytes = %d\n", c.opts.ReservedBytes)
		}
		if c.opts.CatchUpReadBytes > 0 {
			fmt.Fprintf(&sb, "catchup_read_bytes = %d\n", c.opts.CatchUpReadBytes)
		}
		if c.opts.CatchUpReadBytesPerSec > 0 {
			fmt.Fprintf(&sb, "catchup_read_bytes_per_sec = %d\n", c.opts.CatchUpReadBytesPerSec)
		}
		if c.opts.CatchUpReadsNoYield {
			sb.WriteString("catchup_reads_no_yield = true\n")
		}
		sb.WriteString("\n")
	}
	fmt.Fprintf(&sb, "[log]\nlevel = %q\n\n", c.opts.LogLevel)
	if len(c.ConfigServers) > 0 {
		// Its peers and streams come from the config servers; top-level
		// keys go before the tables.
		return c.controlledConfig(n) + sb.String()
	}
	for _, p := range c.Nodes {
		// admin: servers copy a snapshot's entries from each other over it.
		fmt.Fprintf(&sb, "[[peers]]\nid = %d\nraft = %q\nkafka = %q\nkafka_tls = %q\nadmin = %q\n\n", p.ID, p.Raft, p.Kafka, p.KafkaTLS, p.Admin)
	}
	for i, s := range c.opts.Streams {
		fmt.Fprintf(&sb, "[[streams]]\nname = %q\nid = %d\n\n", s, i+1)
	}
	return sb.String()
}

// freePorts picks n distinct free TCP ports (testnet: below the ephemeral
// range, so no test's outgoing connection takes one meanwhile).
func freePorts(tb T, n int) []int { return testnet.FreePorts(tb, n) }

// startAll starts every node and waits for their health and the streams'
// leaders.
func (c *Cluster) startAll() {
	c.tb.Helper()
	if len(c.ConfigServers) > 0 {
		c.startConfigServers()
	}
	for _, n := range c.Nodes {
		c.StartNode(n.ID)
	}
	for _, n := range c.Nodes {
		c.WaitHealthy(n.ID, c.opts.StartTimeout)
	}
	streams := c.opts.Streams
	if len(c.ConfigServers) > 0 {
		c.createStreams()
		// Groups and idempotent producers need the offsets stream, which
		// the config servers create.
		streams = append(slices.Clone(streams), "__consumer_offsets")
	}
	for _, s := range streams {
		c.WaitLeader(s, c.opts.StartTimeout)
	}
}

// StartNode runs a node's process and returns at once; env is added to the
// environment (GO_FAILPOINTS, say). Its output goes to LogPath.
func (c *Cluster) StartNode(id uint64, env ...string) {
	c.tb.Helper()
	n := c.Node(id)
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.tb.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.starts++
	start := n.starts
	fmt.Fprintf(logf, "=== harness: start #%d of node %d at %s env %v ===\n", start, n.ID, time.Now().Format(time.RFC3339Nano), env)
	args := []string{c.bin, "server", "--config", n.ConfigPath}
	if isConfigServer(n.ID) {
		args[1] = "configserver"
	}
	if c.opts.Wrap != nil {
		args = append(c.opts.Wrap(n.ID), args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), c.opts.Env...), env...)
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
			c.unexpected = append(c.unexpected, exit{n.ID, start, fmt.Sprintf("node %d exited unexpectedly: %v", n.ID, err)})
			c.mu.Unlock()
		}
		close(exited)
	}()
}

// Wipe deletes a stopped node's data dir (a replaced disk) and makes its
// configuration say initial_cluster_state = state ("new" or "existing").
func (c *Cluster) Wipe(id uint64, state string) {
	c.tb.Helper()
	n := c.Node(id)
	if n.Running() {
		c.tb.Fatalf("node %d is running", id)
	}
	if err := os.RemoveAll(n.DataDir); err != nil {
		c.tb.Fatal(err)
	}
	n.joining = state == "existing"
	if err := os.WriteFile(n.ConfigPath, []byte(c.config(n)), 0o644); err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Logf("wiped node %d's data dir (initial_cluster_state = %q)", id, state)
}

// Node returns the node with id.
func (c *Cluster) Node(id uint64) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	for _, n := range c.ConfigServers {
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

// expectExit marks the node's current process as one whose end the harness
// or the test asked for (not reported as unexpected) and returns it.
func (n *Node) expectExit() (cmd *exec.Cmd, exited chan struct{}, start int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expected = true
	return n.cmd, n.exited, n.starts
}

// report fails the test for processes that died on their own and, if the
// test failed, prints the tail of every server log and keeps the whole logs
// (the cluster dir goes away with the test).
func (c *Cluster) report() {
	c.mu.Lock()
	for _, u := range c.unexpected {
		c.tb.Error(u.msg)
	}
	c.mu.Unlock()
	if !c.tb.Failed() {
		return
	}
	keep, err := os.MkdirTemp("", "vdl-proccluster-logs-")
	for _, n := range append(slices.Clone(c.Nodes), c.ConfigServers...) {
		c.tb.Logf("---- tail of %s ----\n%s", n.LogPath, Tail(n.LogPath, c.opts.TailLines))
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

// Tail returns the last lines of the file at path (or the read error).
func Tail(path string, lines int) string {
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

// CPUSeconds is the user+system CPU time the cluster's running processes
// have used so far (Linux /proc; 0 elsewhere), for benchmarks that report
// the servers' CPU per MB.
func (c *Cluster) CPUSeconds() float64 {
	var s float64
	for _, n := range c.Nodes {
		s += n.cpuSeconds()
	}
	return s
}

// MinorFaults is the page faults without IO (fresh memory touched first,
// mostly) of the running nodes' processes so far, all nodes together.
func (c *Cluster) MinorFaults() int64 {
	var t int64
	for _, n := range c.Nodes {
		if f := n.stat(); len(f) > 7 {
			var v int64
			fmt.Sscan(f[7], &v) // minflt: field 10 of the line
			t += v
		}
	}
	return t
}

func (n *Node) cpuSeconds() float64 {
	// utime and stime are fields 14 and 15 of the line, in clock ticks
	// (USER_HZ = 100 on Linux).
	f := n.stat()
	if len(f) < 13 {
		return 0
	}
	var ut, st float64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return (ut + st) / 100
}

// stat is the node process's /proc/<pid>/stat from field 3 on (after the
// ")" that ends the command name); nil if it is not running.
func (n *Node) stat() []string {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
