package campaign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// Step is one command as it ran: what the cluster did, and whether what
// must hold held.
type Step struct {
	Command Command
	Output  string
	Err     error
	Took    time.Duration
}

// Result is one script's run.
type Result struct {
	Script  string
	Steps   []Step
	Started time.Time
	Took    time.Duration
	Dir     string      // the report directory, if one was written
	Summary *RunSummary // what summary.json says, if a report directory was written
	// Interrupted: the run was stopped half way (SIGINT); its verdict is
	// INTERRUPTED.
	Interrupted bool
}

// errUnsupported: the command needs what real processes on the loopback
// cannot do yet (partitions need network namespaces or per-peer drops).
var errUnsupported = errors.New("not supported against real processes yet")

// runner holds a script's cluster and what it acknowledged.
type runner struct {
	t       proccluster.T
	bin     string
	c       *proccluster.Cluster
	streams []string
	acked   map[string][]ack  // per stream, in acknowledgement order
	next    int               // values are unique across the run
	killed  uint64            // the last node killed ("killed" names it)
	powered map[uint64]bool   // nodes whose power was cut, until restarted
	history *checker.Recorder // every produce as the client saw it
	nemesis *nemesis          // the fault mix of the next workloads
	active  []activeFault     // faults the nemesis has not undone yet
	conns   int               // client connections so far (one per produce command)

	opts        Options
	t0          time.Time         // the history's clock starts here (monotonic)
	mu          sync.Mutex        // faults, clients, found
	faults      []faultWindow     // every fault injected, open or undone
	clients     map[int]string    // connection -> client implementation (franz-go, kcat)
	found       []string          // what failed so far (step errors), for the progress line
	checks      []*checker.Result // every check's history result
	net         *Topology         // network namespaces, nil on the loopback
	cuts        [][2]uint64       // directed links cut (from, to) until the next heal
	dcs         int               // DCs of the cluster (start-cluster dcs=)
	disks       []string          // size-limited data dirs (start-cluster disk=), mounted
	name        string            // the campaign's
	steps       []Step            // the steps done so far (for a report after an interrupt)
	interrupted atomic.Bool       // Interrupt ran: the run's own end writes no report
	prog        *progress         // the progress line's counts (its goroutine only)
	preferred   []string          // the streams' preferred DCs (config servers)
	liveness    string            // what the preferred-DC check found
}

type ack struct {
	value  string
	offset int64
}

// Abort is what a command-line T panics with on Fatal: the step ends
// with the message, and the script with it (the cluster is in no state
// to go on from).
type Abort struct{ Msg string }

// Run runs a script's commands against real processes of bin, one after
// another; a step that fails is reported and the run goes on (a later
// check says what the failure left), unless it aborted or could not be
// done with this binary (the rest assumed it happened: INCOMPLETE).
func Run(t proccluster.T, bin, name string, cmds []Command) Result {
	return RunWith(t, bin, name, cmds, Options{})
}

// Options are what a run does besides running the script.
type Options struct {
	// ReportDir, when set, receives the run's report directory
	// (history.jsonl, summary.json, report.md, report.html; see WriteRunDir).
	ReportDir string
	// Replay is the command that runs this campaign again, for the report.
	Replay string
	// Progress, when set, gets a line every ProgressEvery (default 5s):
	// elapsed, ops ok/failed/unknown, current faults, anomalies so far.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Net is the network the cluster runs on: "loopback" (or ""), "netns"
	// (root only) or "auto" (netns when root, loopback otherwise); a
	// script's start-cluster net= overrides it.
	Net string
	// Duration, when set, replaces every workload's duration (a longer
	// run of the same campaign).
	Duration time.Duration
	// Started, when set, is called with the runner's interrupt hook as the
	// run begins: it kills every server of the run at once, removes its
	// namespaces and mounts and writes the report so far (the command's
	// SIGINT handler calls it before the cleanups).
	Started func(interrupt func())

	beforeStep func(r *runner, cmd Command) // tests: forge what a broken server would have done
}

// RunWith is Run with a report directory and a progress line.
func RunWith(t proccluster.T, bin, name string, cmds []Command, opts Options) Result {
	r := &runner{t: t, bin: bin, acked: map[string][]ack{}, powered: map[uint64]bool{}, opts: opts,
		t0: time.Now(), clients: map[int]string{}}
	r.history = checker.NewRecorder(r.now)
	r.name = name
	res := Result{Script: name, Started: r.t0}
	if opts.Started != nil {
		opts.Started(r.interrupt)
	}
	stop := r.startProgress()
	for _, cmd := range cmds {
		if opts.beforeStep != nil {
			opts.beforeStep(r, cmd)
		}
		start := time.Now()
		out, aborted, err := r.safeDo(cmd)
		r.mu.Lock()
		res.Steps = append(res.Steps, Step{Command: cmd, Output: out, Err: err, Took: time.Since(start)})
		r.steps = slices.Clone(res.Steps)
		if err != nil && !errors.Is(err, errUnsupported) {
			r.found = append(r.found, fmt.Sprintf("%s: %v", cmd.Name, err))
		}
		r.mu.Unlock()
		if aborted || errors.Is(err, errUnsupported) {
			break // what follows assumed the step happened
		}
	}
	stop()
	res.Took = time.Since(r.t0)
	if r.interrupted.Load() {
		return res // the interrupt wrote the report
	}
	if opts.ReportDir != "" {
		if err := r.writeRunDir(opts.ReportDir, &res); err != nil {
			t.Errorf("report %s: %v", opts.ReportDir, err)
		}
		res.Dir = opts.ReportDir
	}
	return res
}

// now is the history's clock: nanoseconds since the run began (monotonic).
func (r *runner) now() int64 { return int64(time.Since(r.t0)) }

func (r *runner) safeDo(cmd Command) (out string, aborted bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			a, ok := p.(Abort)
			if !ok {
				panic(p)
			}
			err, aborted = errors.New(a.Msg), true
		}
	}()
	out, err = r.do(cmd)
	return out, false, err
}

func (r *runner) do(cmd Command) (string, error) {
	if r.c == nil && cmd.Name != "start-cluster" {
		return "", errors.New("no cluster: the script must start with start-cluster")
	}
	switch cmd.Name {
	case "start-cluster":
		return r.startCluster(cmd)
	case "produce":
		return r.produce(cmd)
	case "kill":
		return r.kill(cmd)
	case "power-loss":
		return r.powerLoss(cmd)
	case "restart":
		return r.restart(cmd)
	case "run":
		return r.run(cmd)
	case "status":
		return r.status(), nil
	case "check":
		return r.check(cmd)
	case "nemesis":
		return r.setNemesis(cmd)
	case "workload":
		return r.workload(cmd)
	case "partition":
		return r.partition(cmd)
	case "heal":
		return r.heal()
	}
	return "", fmt.Errorf("unknown command %q", cmd.Name)
}

func intKey(cmd Command, key string, def int) (int, error) {
	v, ok := cmd.Keys[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number", key, v)
	}
	return n, nil
}

// start-cluster nodes=N streams=S [dcs=D] [net=loopback|netns|auto]
// [latency=0,20/20,0] [jitter=MS] [loss=0,1/1,0] (seed= is the
// simulator's; ignored). net=netns (auto: when root) puts each server in
// its own network namespace, node i in DC ((i-1) mod D) + 1, with the
// one-way latency (ms), jitter and loss (%) matrices between DCs (rows
// separated by /).
func (r *runner) startCluster(cmd Command) (string, error) {
	nodes, err := intKey(cmd, "nodes", 3)
	if err != nil {
		return "", err
	}
	streams, err := intKey(cmd, "streams", 1)
	if err != nil {
		return "", err
	}
	r.dcs, err = intKey(cmd, "dcs", 1)
	if err != nil {
		return "", err
	}
	spec := NetSpec{DCs: r.dcs}
	if spec.LatencyMillis, err = matrixKey(cmd, "latency"); err != nil {
		return "", err
	}
	if spec.LossPercent, err = matrixKey(cmd, "loss"); err != nil {
		return "", err
	}
	if j, ok := cmd.Keys["jitter"]; ok {
		if spec.JitterMillis, err = strconv.ParseFloat(j, 64); err != nil {
			return "", fmt.Errorf("jitter=%q: %v", j, err)
		}
	}
	mode := r.opts.Net
	if m, ok := cmd.Keys["net"]; ok {
		mode = m
	}
	switch mode {
	case "auto":
		mode = "loopback"
		if os.Geteuid() == 0 {
			mode = "netns"
		}
	case "":
		mode = "loopback"
	case "loopback", "netns":
	default:
		return "", fmt.Errorf("net=%q: want loopback, netns or auto", mode)
	}
	if mode == "loopback" && (spec.LatencyMillis != nil || spec.LossPercent != nil) {
		return "", fmt.Errorf("a latency or loss matrix needs net=netns (root): %w", errUnsupported)
	}
	for i := range streams {
		r.streams = append(r.streams, fmt.Sprintf("s%d", i+1))
	}
	opts := proccluster.Options{Nodes: nodes, Streams: r.streams, StartTimeout: 30 * time.Second}
	if err := r.controlPlane(cmd, &opts, &spec); err != nil {
		return "", err
	}
	if _, ok := cmd.Keys["disk"]; ok {
		mib, err := intKey(cmd, "disk", 0)
		if err != nil {
			return "", err
		}
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("disk=: mounting size-limited data dirs needs root: %w", errUnsupported)
		}
		// The cluster dir's name carries the run's prefix, so Sweep finds
		// a mount a dead run left.
		opts.Dir = filepath.Join(r.t.TempDir(), fmt.Sprintf("%s%d-%d-cluster", NetPrefix, os.Getpid(), nextSeq()))
		var ids []uint64
		for i := range nodes {
			ids = append(ids, uint64(i+1))
		}
		mounts, err := mountDisks(opts.Dir, ids, mib)
		r.mu.Lock()
		r.disks = mounts
		r.mu.Unlock()
		r.t.Cleanup(func() {
			if err := unmountDisks(mounts); err != nil {
				r.t.Errorf("data dirs: %v", err)
			}
		})
		if err != nil {
			return "", err
		}
		for _, m := range mounts {
			opts.DataDirs = append(opts.DataDirs, filepath.Join(m, "data"))
		}
		opts.SegmentBytes, opts.ReservedBytes = diskSegmentBytes, diskReservedBytes
	}
	if mode == "netns" {
		topo, err := NewTopology(nodes, spec)
		if errors.Is(err, ErrNotRoot) {
			return "", fmt.Errorf("net=netns: %v: %w", err, errUnsupported)
		}
		if err != nil {
			return "", err
		}
		r.t.Cleanup(func() {
			if err := topo.Close(); err != nil {
				r.t.Errorf("network namespaces: %v", err)
			}
		})
		r.mu.Lock()
		r.net = topo
		r.mu.Unlock()
		opts.Hosts, opts.Wrap = topo.Hosts(), topo.Wrap
	}
	r.labelDCs(&opts)
	c := proccluster.Start(r.t, r.bin, opts)
	r.mu.Lock()
	r.c = c
	r.mu.Unlock()
	out := r.status()
	if r.net != nil {
		out = "network: " + r.net.Describe() + "\n" + out
	}
	if len(r.disks) > 0 {
		out = fmt.Sprintf("data dirs: %s tmpfs each\n", cmd.Keys["disk"]+" MiB") + out
	}
	return out, nil
}

// interrupt kills every server of the run at once (SIGKILL works on a
// stopped process too), again for a while in case a step restarted one
// meanwhile, removes the namespaces and mounts, and writes the report
// directory of the run so far (verdict INTERRUPTED, the server logs kept).
func (r *runner) interrupt() {
	r.interrupted.Store(true)
	r.mu.Lock()
	c, topo, disks := r.c, r.net, r.disks
	r.mu.Unlock()
	if c == nil {
		return // no server runs yet; the cleanups remove what was made
	}
	defer r.writeInterrupted()
	for range 3 {
		for _, n := range append(slices.Clone(c.Nodes), c.ConfigServers...) {
			if n.Running() {
				c.Kill(n.ID)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if topo != nil {
		_ = topo.Close()
	}
	_ = unmountDisks(disks)
}

func (r *runner) writeInterrupted() {
	if r.opts.ReportDir == "" {
		return
	}
	r.mu.Lock()
	res := Result{Script: r.name, Steps: slices.Clone(r.steps), Started: r.t0, Took: time.Since(r.t0), Interrupted: true}
	r.mu.Unlock()
	if err := r.writeRunDir(r.opts.ReportDir, &res); err != nil {
		r.t.Logf("report %s: %v", r.opts.ReportDir, err)
	}
}

// matrixKey parses key=0,20/20,0 (rows separated by /); nil if absent.
func matrixKey(cmd Command, key string) ([][]float64, error) {
	v, ok := cmd.Keys[key]
	if !ok {
		return nil, nil
	}
	var m [][]float64
	for _, row := range strings.Split(v, "/") {
		var r []float64
		for _, f := range strings.Split(row, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %v", key, v, err)
			}
			r = append(r, x)
		}
		m = append(m, r)
	}
	return m, nil
}

// node resolves X: a node id, "killed" (the last node killed), or
// "leader" of stream= (default the first).
func (r *runner) node(cmd Command) (uint64, error) {
	if len(cmd.Args) != 1 {
		return 0, fmt.Errorf("%s takes a node: an id or leader", cmd.Name)
	}
	if cmd.Args[0] == "killed" {
		if r.killed == 0 {
			return 0, errors.New("no node was killed")
		}
		return r.killed, nil
	}
	if cmd.Args[0] == "leader" {
		return r.c.WaitLeader(r.stream(cmd), 20*time.Second), nil
	}
	id, err := strconv.ParseUint(cmd.Args[0], 10, 64)
	if err != nil || r.c.Node(id) == nil {
		return 0, fmt.Errorf("no node %q", cmd.Args[0])
	}
	return id, nil
}

func (r *runner) stream(cmd Command) string {
	if s, ok := cmd.Keys["stream"]; ok {
		return s
	}
	return r.streams[0]
}

func (r *runner) kill(cmd Command) (string, error) {
	id, err := r.node(cmd)
	if err != nil {
		return "", err
	}
	r.c.Kill(id)
	r.killed = id
	r.openFault(nodeKey(id), "kill", fmt.Sprintf("n%d", id))
	return fmt.Sprintf("killed n%d (kill -9)", id), nil
}

// power-loss X: the failpoint build's power cut (what was not fsynced is
// lost; the data dir is on a vfs.Lazy). A production build has none.
func (r *runner) powerLoss(cmd Command) (string, error) {
	id, err := r.node(cmd)
	if err != nil {
		return "", err
	}
	if _, err := r.failpoints(id).List(); err != nil {
		return "", r.noFailpoints("power losses", err)
	}
	r.c.PowerLoss(id)
	r.killed, r.powered[id] = id, true
	r.openFault(nodeKey(id), "power-loss", fmt.Sprintf("n%d", id))
	return fmt.Sprintf("cut the power of n%d", id), nil
}

// restart X; after a power loss, the node must have kept everything it
// had reported durable (GET /debug/durability).
func (r *runner) restart(cmd Command) (string, error) {
	id, err := r.node(cmd)
	if err != nil {
		return "", err
	}
	if r.c.Node(id).Running() {
		return "", fmt.Errorf("n%d is running", id)
	}
	r.c.Restart(id)
	r.closeFaults(nodeKey(id))
	if !r.powered[id] {
		return fmt.Sprintf("restarted n%d", id), nil
	}
	delete(r.powered, id)
	lost, err := r.c.Durability(id)
	if err != nil {
		return "", err
	}
	if len(lost) > 0 {
		return "", fmt.Errorf("n%d lost what it had reported durable: %s", id, strings.Join(lost, "; "))
	}
	return fmt.Sprintf("restarted n%d: it kept everything it had reported durable", id), nil
}

// run D: let the cluster run for a while (wall time here).
func (r *runner) run(cmd Command) (string, error) {
	if len(cmd.Args) != 1 {
		return "", errors.New("run takes a duration")
	}
	d, err := time.ParseDuration(cmd.Args[0])
	if err != nil {
		return "", err
	}
	time.Sleep(d)
	return fmt.Sprintf("ran %v", d), nil
}

// produce n=N [stream=S]: N unique values, each acknowledged (acks=all)
// or not; the acknowledged ones are what check holds the cluster to.
func (r *runner) produce(cmd Command) (string, error) {
	n, err := intKey(cmd, "n", 10)
	if err != nil {
		return "", err
	}
	stream := r.stream(cmd)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(20*time.Second))
	// Sequential produces on a quiet cluster: the client's retries (after
	// a leader change) are fine here, a value is never in flight twice.
	if err != nil {
		return "", err
	}
	defer cl.Close()
	r.conns++
	r.setClient(r.conns, clientFranz)
	ok := 0
	var first, last int64 = -1, -1
	for range n {
		r.next++
		v := fmt.Sprintf("%s-%d", stream, r.next)
		h := r.history.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: r.conns, Conn: r.conns, Value: v})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rec, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
		cancel()
		if err != nil {
			h.Info(err.Error(), false) // not acknowledged: it may or may not have landed
			continue
		}
		h.ProduceOK(rec.Offset)
		r.acked[stream] = append(r.acked[stream], ack{v, rec.Offset})
		if first < 0 {
			first = rec.Offset
		}
		last = rec.Offset
		ok++
	}
	return fmt.Sprintf("%s: acknowledged %d of %d at offsets [%d,%d]", stream, ok, n, first, last), nil
}

// status: each stream as each running node sees it.
func (r *runner) status() string {
	var sb strings.Builder
	for _, s := range r.streams {
		fmt.Fprintf(&sb, "%s:\n", s)
		for _, n := range r.c.Nodes {
			if !n.Running() {
				fmt.Fprintf(&sb, "  n%d down\n", n.ID)
				continue
			}
			st, err := r.c.StreamStatus(n.ID, s)
			if err != nil {
				fmt.Fprintf(&sb, "  n%d %v\n", n.ID, err)
				continue
			}
			fmt.Fprintf(&sb, "  n%d %-12s term=%d end=%d hwm=%d\n", n.ID, strings.ToLower(strings.TrimPrefix(st.Role, "State")),
				st.Term, st.EndOffset, st.HighWatermark)
		}
	}
	return strings.TrimRight(sb.String(), "\n")
}
