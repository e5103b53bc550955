package campaign

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// Network namespaces (root only): each server in its own namespace, a veth
// pair from it into its DC's bridge, the DCs' bridges joined by a router
// namespace that forwards between them, and a veth from the router to the
// host namespace, where the clients run (the host routes the run's /16 to
// the router). Latency, jitter and loss between DCs follow the campaign's
// matrix: tc netem on each server's interface (a class per other DC, the
// DC's subnet as filter) for delay and jitter, nft for loss — or, where the
// kernel has no netem, the userspace WAN (wan.go: a TUN device in the
// router namespace that every packet between DCs goes through). Partitions are
// nft rules inside the servers' namespaces. Everything is named with the
// prefix vdlj-<pid>-<seq>- (namespaces) or vj<pid>-<seq> (the one
// interface in the host namespace), so that Sweep finds what a run that
// died left behind.
//
//	host ── vj<pid>-<seq> ═ host0 ── router ns ─┬─ br1 ─ n1 ═ eth0 (ns vdlj-…-n1, 10.S.1.11)
//	10.S.0.1                         10.S.0.2   │       n4 ═ eth0 (ns vdlj-…-n4, 10.S.1.14)
//	                                            └─ br2 ─ n2 ═ eth0 (ns vdlj-…-n2, 10.S.2.12)

// NetPrefix starts the name of every namespace a campaign creates.
const NetPrefix = "vdlj-"

// hostIfPrefix starts the name of the run's interface in the host
// namespace (15 characters at most: vj<pid>-<seq>).
const hostIfPrefix = "vj"

// NetSpec is the network of a campaign's cluster.
type NetSpec struct {
	DCs int // default 1; node i is in DC ((i-1) mod DCs) + 1
	// LatencyMillis[a][b] is the one-way delay added to what DC a+1 sends
	// to DC b+1; JitterMillis its jitter; LossPercent[a][b] the share of
	// those packets lost. Nil: none.
	LatencyMillis [][]float64
	JitterMillis  float64
	LossPercent   [][]float64
	// ConfigServers get a namespace each too (config server k, node id
	// proccluster.ConfigServerID(k), in DC ((k-1) mod DCs) + 1, at
	// 10.S.<dc>.<200+k>).
	ConfigServers int
	// Shaper applies the matrices: ShaperAuto (netem when the kernel has
	// it, else the userspace WAN), ShaperNetem or ShaperUserspace.
	Shaper string
}

// Topology is a cluster's network namespaces.
type Topology struct {
	ID     string // vdlj-<pid>-<seq>
	spec   NetSpec
	octet  int // 10.<octet>.0.0/16
	router string
	hostIf string
	nodes  map[uint64]*netNode
	ids    []uint64 // the servers'
	csIDs  []uint64 // the config servers'
	shaper string   // what applies the matrices (ShaperNetem, ShaperUserspace), "" none
	wan    *WAN     // the userspace WAN, if it does

	mu     sync.Mutex
	closed bool
}

type netNode struct {
	ns string
	ip string
	dc int
}

var topoSeq struct {
	sync.Mutex
	n int
}

// nextSeq numbers this process's namespaces and mounts.
func nextSeq() int {
	topoSeq.Lock()
	defer topoSeq.Unlock()
	topoSeq.n++
	return topoSeq.n
}

// ErrNotRoot: network namespaces need root (the loopback mode does not).
var ErrNotRoot = errors.New("network namespaces need root")

// NewTopology creates the namespaces, bridges, veths, routes and link
// shaping of a cluster of nodes; Close removes them. A failure half way
// removes what was made.
func NewTopology(nodes int, spec NetSpec) (*Topology, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if spec.DCs <= 0 {
		spec.DCs = 1
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	seq := nextSeq()
	pid := os.Getpid()
	t := &Topology{
		ID: fmt.Sprintf("%s%d-%d", NetPrefix, pid, seq), spec: spec, nodes: map[uint64]*netNode{},
		hostIf: fmt.Sprintf("%s%d-%d", hostIfPrefix, pid, seq),
	}
	if len(t.hostIf) > 15 {
		t.hostIf = t.hostIf[len(t.hostIf)-15:]
	}
	t.router = t.ID + "-r"
	// Another run may take the same /16 between the look and the route:
	// its route then exists, and this run tries the next free one.
	var err error
	for attempt := range 5 {
		var octet int
		if octet, err = freeOctet(pid*31 + seq + 37*attempt); err != nil {
			return nil, err
		}
		t.octet, t.closed = octet, false
		t.ids, t.csIDs, t.nodes = nil, nil, map[uint64]*netNode{}
		for i := range nodes {
			id := uint64(i + 1)
			dc := i%spec.DCs + 1
			t.ids = append(t.ids, id)
			t.nodes[id] = &netNode{ns: fmt.Sprintf("%s-n%d", t.ID, id), ip: fmt.Sprintf("10.%d.%d.%d", octet, dc, 10+id), dc: dc}
		}
		for k := 1; k <= spec.ConfigServers; k++ {
			id, dc := proccluster.ConfigServerID(k), (k-1)%spec.DCs+1
			t.csIDs = append(t.csIDs, id)
			t.nodes[id] = &netNode{ns: fmt.Sprintf("%s-c%d", t.ID, k), ip: fmt.Sprintf("10.%d.%d.%d", octet, dc, 200+k), dc: dc}
		}
		if err = t.create(); err == nil {
			return t, nil
		}
		_ = t.Close()
		if !strings.Contains(err.Error(), "File exists") {
			return nil, err
		}
	}
	return nil, err
}

func (s NetSpec) validate() error {
	for _, m := range [][][]float64{s.LatencyMillis, s.LossPercent} {
		if m == nil {
			continue
		}
		if len(m) != s.DCs {
			return fmt.Errorf("a %d-DC matrix for %d DCs", len(m), s.DCs)
		}
		for _, row := range m {
			if len(row) != s.DCs {
				return fmt.Errorf("a matrix row of %d for %d DCs", len(row), s.DCs)
			}
			for _, v := range row {
				if v < 0 {
					return fmt.Errorf("negative delay or loss %v", v)
				}
			}
		}
	}
	return nil
}

// freeOctet picks 10.X.0.0/16 with X in [100, 250) that no route of the
// host uses yet, starting from a hash of the run.
func freeOctet(h int) (int, error) {
	out, err := exec.Command("ip", "-4", "route", "show").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ip route: %v: %s", err, out)
	}
	routes := string(out)
	for i := range 150 {
		x := 100 + (h+i)%150
		if !strings.Contains(routes, fmt.Sprintf("10.%d.", x)) {
			return x, nil
		}
	}
	return 0, errors.New("no free 10.X.0.0/16 for the campaign's network")
}

func (t *Topology) create() error {
	r := t.router
	cmds := [][]string{
		{"ip", "netns", "add", r},
		{"ip", "-n", r, "link", "set", "lo", "up"},
		{"ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "link", "add", t.hostIf, "type", "veth", "peer", "name", "host0", "netns", r},
		{"ip", "addr", "add", t.subnetIP(0, 1) + "/24", "dev", t.hostIf},
		{"ip", "link", "set", t.hostIf, "up"},
		{"ip", "-n", r, "addr", "add", t.subnetIP(0, 2) + "/24", "dev", "host0"},
		{"ip", "-n", r, "link", "set", "host0", "up"},
		{"ip", "route", "add", fmt.Sprintf("10.%d.0.0/16", t.octet), "via", t.subnetIP(0, 2)},
	}
	for dc := 1; dc <= t.spec.DCs; dc++ {
		br := fmt.Sprintf("br%d", dc)
		cmds = append(cmds,
			[]string{"ip", "-n", r, "link", "add", br, "type", "bridge"},
			[]string{"ip", "-n", r, "addr", "add", t.subnetIP(dc, 1) + "/24", "dev", br},
			[]string{"ip", "-n", r, "link", "set", br, "up"})
	}
	for _, id := range t.all() {
		n := t.nodes[id]
		peer := fmt.Sprintf("n%d", id)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.ns},
			[]string{"ip", "-n", r, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", n.ns},
			[]string{"ip", "-n", r, "link", "set", peer, "master", fmt.Sprintf("br%d", n.dc), "up"},
			[]string{"ip", "-n", n.ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", n.ns, "addr", "add", n.ip + "/24", "dev", "eth0"},
			[]string{"ip", "-n", n.ns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", n.ns, "route", "add", "default", "via", t.subnetIP(n.dc, 1)})
	}
	for _, c := range cmds {
		if err := run(c...); err != nil {
			return err
		}
	}
	if err := t.chooseShaper(); err != nil {
		return err
	}
	for _, id := range t.all() {
		if err := t.nftBase(id); err != nil {
			return err
		}
		if t.shaper != ShaperNetem {
			continue
		}
		if err := t.shape(id); err != nil {
			return err
		}
	}
	if t.shaper == ShaperUserspace {
		return t.startWAN()
	}
	return nil
}

// chooseShaper decides what applies the matrices: nothing without them,
// nft alone for a loss matrix without latency (netem: ShaperNetem), tc
// netem where the kernel has it, the userspace WAN otherwise.
func (t *Topology) chooseShaper() error {
	switch {
	case t.spec.LatencyMillis == nil && t.spec.LossPercent == nil:
		t.shaper = ""
	case t.spec.Shaper == ShaperUserspace:
		t.shaper = ShaperUserspace
	case t.spec.Shaper == ShaperNetem || t.spec.LatencyMillis == nil:
		t.shaper = ShaperNetem
	case t.spec.Shaper == ShaperAuto:
		t.shaper = ShaperUserspace
		if NetemAvailable() {
			t.shaper = ShaperNetem
		}
	default:
		return fmt.Errorf("shaper %q: want netem, userspace or none", t.spec.Shaper)
	}
	return nil
}

func (t *Topology) subnetIP(dc, host int) string {
	return fmt.Sprintf("10.%d.%d.%d", t.octet, dc, host)
}

func run(args ...string) error {
	return runIn(nil, args...)
}

func runIn(stdin []byte, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nftBase makes the node's table: chains for partitions (cut_in,
// cut_out) and for the loss between DCs (loss_out).
func (t *Topology) nftBase(id uint64) error {
	n := t.nodes[id]
	var sb strings.Builder
	sb.WriteString("table inet vdlj {\n")
	sb.WriteString("  chain cut_in { type filter hook input priority 0; policy accept; }\n")
	sb.WriteString("  chain cut_out { type filter hook output priority 0; policy accept; }\n")
	sb.WriteString("  chain loss_out { type filter hook output priority 1; policy accept;\n")
	if t.spec.LossPercent != nil && t.shaper == ShaperNetem {
		for dc := 1; dc <= t.spec.DCs; dc++ {
			if p := t.spec.LossPercent[n.dc-1][dc-1]; p > 0 && dc != n.dc {
				fmt.Fprintf(&sb, "    ip daddr 10.%d.%d.0/24 numgen random mod 10000 < %d drop\n", t.octet, dc, int(p*100))
			}
		}
	}
	sb.WriteString("  }\n}\n")
	return runIn([]byte(sb.String()), "ip", "netns", "exec", n.ns, "nft", "-f", "-")
}

// NetemAvailable reports whether the kernel has tc netem (some VM kernels
// are built without sch_netem: no delay can be added there).
func NetemAvailable() bool {
	ns := fmt.Sprintf("%s%d-probe", NetPrefix, os.Getpid())
	if run("ip", "netns", "add", ns) != nil {
		return false
	}
	defer func() { _ = run("ip", "netns", "del", ns) }()
	return run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") == nil
}

// errNoNetem: the campaign asks for a delay this kernel cannot add.
var errNoNetem = fmt.Errorf("this kernel has no tc netem (sch_netem): the latency matrix cannot be applied: %w", errUnsupported)

// shape adds the delay and jitter from the node's DC to each other DC: an
// htb root with a class per DC, a netem qdisc under it, and a u32 filter
// on the DC's subnet.
func (t *Topology) shape(id uint64) error {
	n := t.nodes[id]
	if t.spec.LatencyMillis == nil {
		return nil
	}
	var cmds [][]string
	tc := func(args ...string) {
		cmds = append(cmds, append([]string{"ip", "netns", "exec", n.ns, "tc"}, args...))
	}
	tc("qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
	tc("class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit")
	shaped := false
	for dc := 1; dc <= t.spec.DCs; dc++ {
		d := t.spec.LatencyMillis[n.dc-1][dc-1]
		if dc == n.dc || d <= 0 {
			continue
		}
		shaped = true
		class := fmt.Sprintf("1:%d", 10+dc)
		tc("class", "add", "dev", "eth0", "parent", "1:", "classid", class, "htb", "rate", "10gbit")
		netem := []string{"qdisc", "add", "dev", "eth0", "parent", class, "handle", fmt.Sprintf("%d:", 10+dc), "netem", "delay", fmtMillis(d)}
		if t.spec.JitterMillis > 0 {
			netem = append(netem, fmtMillis(t.spec.JitterMillis), "distribution", "normal")
		}
		tc(netem...)
		tc("filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
			"match", "ip", "dst", fmt.Sprintf("10.%d.%d.0/24", t.octet, dc), "flowid", class)
	}
	if !shaped {
		return nil
	}
	for _, c := range cmds {
		if err := run(c...); err != nil {
			if strings.Contains(err.Error(), "netem") && strings.Contains(err.Error(), "unknown") {
				return errNoNetem
			}
			return err
		}
	}
	return nil
}

func fmtMillis(ms float64) string { return strconv.FormatFloat(ms, 'f', -1, 64) + "ms" }

// all are the servers' and config servers' ids.
func (t *Topology) all() []uint64 { return append(slices.Clone(t.ids), t.csIDs...) }

// ConfigServerHosts are the config servers' addresses, config server k's
// at k-1.
func (t *Topology) ConfigServerHosts() []string {
	out := make([]string, len(t.csIDs))
	for i, id := range t.csIDs {
		out[i] = t.nodes[id].ip
	}
	return out
}

// Shaper is what applies the matrices: ShaperNetem, ShaperUserspace, or
// "" (none).
func (t *Topology) Shaper() string { return t.shaper }

// Host is a node's address (its servers listen there).
func (t *Topology) Host(id uint64) string { return t.nodes[id].ip }

// Hosts are the nodes' addresses, node i+1's at i.
func (t *Topology) Hosts() []string {
	out := make([]string, len(t.ids))
	for i, id := range t.ids {
		out[i] = t.nodes[id].ip
	}
	return out
}

// Wrap is the command a node's server runs under: in its namespace.
func (t *Topology) Wrap(id uint64) []string { return []string{"ip", "netns", "exec", t.nodes[id].ns} }

// Namespace is a node's namespace.
func (t *Topology) Namespace(id uint64) string { return t.nodes[id].ns }

// DCOf is a node's DC (1-based).
func (t *Topology) DCOf(id uint64) int {
	if n := t.nodes[id]; n != nil {
		return n.dc
	}
	return 1
}

// Describe names the topology for the report.
func (t *Topology) Describe() string {
	s := fmt.Sprintf("%s: %d servers in %d DCs, 10.%d.0.0/16", t.ID, len(t.ids), t.spec.DCs, t.octet)
	if len(t.csIDs) > 0 {
		s = fmt.Sprintf("%s: %d servers and %d config servers in %d DCs, 10.%d.0.0/16", t.ID, len(t.ids), len(t.csIDs), t.spec.DCs, t.octet)
	}
	if t.spec.LatencyMillis != nil {
		s += fmt.Sprintf(", one-way latency %v ms", t.spec.LatencyMillis)
		if t.spec.JitterMillis > 0 {
			s += fmt.Sprintf(" ± %v ms", t.spec.JitterMillis)
		}
	}
	if t.spec.LossPercent != nil {
		s += fmt.Sprintf(", loss %v %%", t.spec.LossPercent)
	}
	switch t.shaper {
	case ShaperNetem:
		s += " (tc netem, nft loss)"
	case ShaperUserspace:
		s += " (userspace WAN: a TUN device in the router namespace)"
	}
	return s
}

// Cut makes the directed links of pairs (from, to) drop everything — and
// only those: links cut before and not in pairs work again. The sender
// drops what it sends to the receiver, the receiver what it gets from the
// sender.
func (t *Topology) Cut(pairs [][2]uint64) error {
	out, in := map[uint64][]string{}, map[uint64][]string{}
	for _, p := range pairs {
		from, to := t.nodes[p[0]], t.nodes[p[1]]
		if from == nil || to == nil {
			return fmt.Errorf("no node in %v", p)
		}
		out[p[0]] = append(out[p[0]], to.ip)
		in[p[1]] = append(in[p[1]], from.ip)
	}
	for _, id := range t.all() {
		var sb strings.Builder
		sb.WriteString("flush chain inet vdlj cut_in\nflush chain inet vdlj cut_out\n")
		if ips := dedup(in[id]); len(ips) > 0 {
			fmt.Fprintf(&sb, "add rule inet vdlj cut_in ip saddr { %s } drop\n", strings.Join(ips, ", "))
		}
		if ips := dedup(out[id]); len(ips) > 0 {
			fmt.Fprintf(&sb, "add rule inet vdlj cut_out ip daddr { %s } drop\n", strings.Join(ips, ", "))
		}
		if err := runIn([]byte(sb.String()), "ip", "netns", "exec", t.nodes[id].ns, "nft", "-f", "-"); err != nil {
			return err
		}
	}
	return nil
}

func dedup(xs []string) []string {
	slices.Sort(xs)
	return slices.Compact(xs)
}

// Heal removes every cut.
func (t *Topology) Heal() error { return t.Cut(nil) }

// Close kills whatever still runs in the namespaces and removes them, the
// bridges, veths and routes with them. It can be called more than once.
func (t *Topology) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	if t.wan != nil {
		errs = append(errs, t.wan.Close())
		t.wan = nil
	}
	for _, id := range t.all() {
		errs = append(errs, removeNamespace(t.nodes[id].ns))
	}
	errs = append(errs, removeNamespace(t.router))
	if linkExists(t.hostIf) {
		errs = append(errs, run("ip", "link", "del", t.hostIf))
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool { return run("ip", "link", "show", "dev", name) == nil }

// removeNamespace SIGKILLs the processes in a namespace and deletes it.
func removeNamespace(ns string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
		return nil
	}
	for range 50 {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return run("ip", "netns", "del", ns)
}
