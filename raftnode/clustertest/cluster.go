// Package clustertest runs whole VDL replica sets inside one test process:
// every server has its own storage logs on real files, its own
// raftnode.Host and a real TCP transport on 127.0.0.1, wired like
// server.New. Servers can be killed, restarted, partitioned and added;
// helpers propose with leader discovery and retry, and check that replicas
// converge to byte-identical committed logs.
package clustertest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/testnet"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/transport"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// Options describe a cluster.
type Options struct {
	Nodes  []uint64 // initial voters of every group, started by New
	Groups []uint64
	// SegmentSize of every log (default 1 MiB).
	SegmentSize  int64
	TickInterval time.Duration // default 20ms
	Core         raftnode.Config
	// BeforeFetch, if set, runs before a server copies snapshot entries
	// from a peer (tests hold installs up with it).
	BeforeFetch func(group, peer uint64)
	// Logger for hosts and transports; default: discard, or stderr at debug
	// level when VDL_CLUSTERTEST_LOG is set.
	Logger *slog.Logger
}

// Cluster is a set of in-process servers.
type Cluster struct {
	tb   testing.TB
	opts Options
	dir  string

	// Locks: mu guards nodes; cutMu, addrMu are leaves. mu is never held
	// while a Node's lock is taken.
	mu     sync.Mutex
	nodes  map[uint64]*Node
	cutMu  sync.RWMutex
	cut    map[[2]uint64]bool // one-way links that drop every message
	addrMu sync.Mutex         // guards every Node.addr
}

// Node is one server.
type Node struct {
	ID  uint64
	c   *Cluster
	dir string

	addr string // guarded by Cluster.addrMu

	mu      sync.Mutex
	host    *raftnode.Host
	tr      *transport.Transport
	logs    map[uint64]*storage.Log
	running bool
}

// New starts a cluster whose groups are bootstrapped with opts.Nodes as
// voters. Everything is stopped at test cleanup.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.SegmentSize == 0 {
		opts.SegmentSize = 1 << 20
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 20 * time.Millisecond
	}
	if opts.Logger == nil {
		if os.Getenv("VDL_CLUSTERTEST_LOG") != "" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
	}
	c := &Cluster{tb: tb, opts: opts, dir: tb.TempDir(), nodes: map[uint64]*Node{}, cut: map[[2]uint64]bool{}}
	tb.Cleanup(c.Close)
	for _, id := range opts.Nodes {
		n := c.AddNode(id)
		for _, g := range opts.Groups {
			if err := n.Bootstrap(g, opts.Nodes); err != nil {
				tb.Fatalf("bootstrap n%d g%d: %v", id, g, err)
			}
		}
	}
	for _, id := range opts.Nodes {
		if err := c.Node(id).Start(); err != nil {
			tb.Fatalf("start n%d: %v", id, err)
		}
	}
	return c
}

// AddNode creates a server (not started) with an empty data directory and
// reserves its listen address, so peers can be told about it.
func (c *Cluster) AddNode(id uint64) *Node {
	addr := testnet.FreeAddr(c.tb)
	n := &Node{ID: id, c: c, dir: filepath.Join(c.dir, fmt.Sprintf("n%d", id)), addr: addr}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	for _, o := range c.Running() {
		o.setPeer(id, addr)
	}
	return n
}

// Node returns the server with id (nil if none).
func (c *Cluster) Node(id uint64) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Running returns the running servers, by id.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.all() {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// all returns every server, by id.
func (c *Cluster) all() []*Node {
	c.mu.Lock()
	out := make([]*Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b *Node) int { return int(a.ID) - int(b.ID) })
	return out
}

// Close kills every server.
func (c *Cluster) Close() {
	for _, n := range c.all() {
		n.Kill()
	}
}

func (n *Node) logDir(group uint64) string {
	return filepath.Join(n.dir, "streams", fmt.Sprintf("%d", group))
}

func (n *Node) openLog(group uint64) (*storage.Log, error) {
	return storage.Open(storage.Options{
		FS:          vfs.OS{},
		Dir:         n.logDir(group),
		Stream:      group,
		SegmentSize: n.c.opts.SegmentSize,
		Logger:      n.c.opts.Logger.With("node", n.ID, "stream", group),
	})
}

// Bootstrap records a group's initial voters in the node's (new) log.
func (n *Node) Bootstrap(group uint64, voters []uint64) error {
	l, err := n.openLog(group)
	if err != nil {
		return err
	}
	err = l.Bootstrap(&raftpb.ConfState{Voters: slices.Clone(voters)})
	return errors.Join(err, l.Close())
}

// Running reports whether the server runs.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

// Host returns the server's host (a stopped one after Kill).
func (n *Node) Host() *raftnode.Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.host
}

// Log returns the server's log of group (nil when not running).
func (n *Node) Log(group uint64) *storage.Log {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return nil
	}
	return n.logs[group]
}

func (n *Node) setPeer(id uint64, addr string) {
	n.mu.Lock()
	tr := n.tr
	n.mu.Unlock()
	if tr != nil {
		tr.SetPeer(id, addr)
	}
}

// snapshotReporter is what the host needs to learn the fate of snapshot
// sends (raft otherwise keeps a peer whose MsgSnap was dropped paused in
// StateSnapshot). Host does not have it yet; wired when it appears.
type snapshotReporter interface {
	ReportSnapshot(group, peer uint64, ok bool)
}

// Start opens the server's logs (groups opts.Groups; a log never
// bootstrapped starts empty) and starts its host and transport, like
// server.New.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		return nil
	}
	c := n.c
	addr := n.address()
	ln, err := net.Listen("tcp", addr)
	addrChanged := false
	if err != nil { // the port was taken meanwhile: take another, tell peers
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		addr, addrChanged = ln.Addr().String(), true
		c.addrMu.Lock()
		n.addr = addr
		c.addrMu.Unlock()
	}
	peers := map[uint64]string{}
	for _, o := range c.all() {
		if o != n {
			peers[o.ID] = o.address()
		}
	}
	var h *raftnode.Host
	tr := transport.New(transport.Config{
		NodeID:      n.ID,
		ClusterID:   1,
		Listener:    ln,
		Peers:       peers,
		Handler:     func(g uint64, m *raftpb.Message) { h.Step(g, m) },
		Unreachable: func(g, p uint64) { h.ReportUnreachable(g, p) },
		SnapshotStatus: func(g, p uint64, failed bool) {
			if r, ok := any(h).(snapshotReporter); ok {
				r.ReportSnapshot(g, p, !failed)
			}
		},
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
		Logger:     c.opts.Logger.With("node", n.ID),
	})
	cc := c.opts.Core
	cc.ID = n.ID
	h = raftnode.NewHost(raftnode.HostConfig{
		Core:         cc,
		TickInterval: c.opts.TickInterval,
		Sender:       &filterSender{c: c, from: n.ID, next: tr},
		Fetch:        c.fetch,
		Logger:       c.opts.Logger.With("node", n.ID),
	})
	logs := map[uint64]*storage.Log{}
	fail := func(err error) error {
		_ = tr.Close()
		h.Stop()
		for _, l := range logs {
			_ = l.Close()
		}
		return err
	}
	for _, g := range c.opts.Groups {
		l, err := n.openLog(g)
		if err != nil {
			return fail(fmt.Errorf("n%d g%d: %w", n.ID, g, err))
		}
		logs[g] = l
		if err := h.AddGroup(g, l); err != nil {
			return fail(fmt.Errorf("n%d g%d: %w", n.ID, g, err))
		}
	}
	if err := tr.Start(); err != nil {
		return fail(err)
	}
	n.host, n.tr, n.logs, n.running = h, tr, logs, true
	if addrChanged {
		go func() {
			for _, o := range c.Running() {
				if o != n {
					o.setPeer(n.ID, addr)
				}
			}
		}()
	}
	return nil
}

// fetch copies snapshot entries from a running peer's log, in process:
// the harness's stand-in for the server's HTTP entry copy.
func (c *Cluster) fetch(group, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
	if c.opts.BeforeFetch != nil {
		c.opts.BeforeFetch(group, peer)
	}
	for _, o := range c.Running() {
		if o.ID != peer {
			continue
		}
		o.mu.Lock()
		l := o.logs[group]
		o.mu.Unlock()
		if l == nil {
			return nil, 0, fmt.Errorf("n%d does not host group %d", peer, group)
		}
		ents, prev, err := l.CommittedEntries(from, to, 4<<20)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*raftpb.Entry, len(ents))
		for i, e := range ents {
			out[i] = proto.Clone(e).(*raftpb.Entry)
		}
		return out, prev, nil
	}
	return nil, 0, fmt.Errorf("n%d is not running", peer)
}

// Kill stops the server abruptly: transport and host stop without any
// handover, logs are closed without a final sync. (Page-cache contents
// survive, as when a process is killed.)
func (n *Node) Kill() {
	n.mu.Lock()
	if !n.running {
		n.mu.Unlock()
		return
	}
	n.running = false
	tr, host, logs := n.tr, n.host, n.logs
	n.tr = nil
	// Unlocked while the host stops: its snapshot installs may be copying
	// entries from the other servers (Cluster.fetch), which takes their
	// locks and this one's.
	n.mu.Unlock()
	_ = tr.Close()
	host.Stop()
	for _, l := range logs {
		_ = l.Close()
	}
}

// Restart kills the server if it runs and starts it again from its disk.
func (n *Node) Restart() error {
	n.Kill()
	return n.Start()
}

func (n *Node) address() string {
	n.c.addrMu.Lock()
	defer n.c.addrMu.Unlock()
	return n.addr
}
