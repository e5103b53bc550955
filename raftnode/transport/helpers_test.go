package transport

import (
	"bytes"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const testCluster = 0xC1D

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) contains(s string) bool { return strings.Contains(l.String(), s) }

// rec is one received message.
type rec struct {
	group uint64
	m     *raftpb.Message
}

// collector records received messages per sender.
type collector struct {
	mu     sync.Mutex
	byFrom map[uint64][]rec
	n      int
}

func newCollector() *collector { return &collector{byFrom: make(map[uint64][]rec)} }

func (c *collector) handle(group uint64, m *raftpb.Message) {
	c.mu.Lock()
	c.byFrom[m.GetFrom()] = append(c.byFrom[m.GetFrom()], rec{group, m})
	c.n++
	c.mu.Unlock()
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *collector) from(id uint64) []rec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]rec(nil), c.byFrom[id]...)
}

// unreach records Unreachable and SnapshotStatus calls.
type unreach struct {
	mu    sync.Mutex
	calls map[[2]uint64]int
	snaps map[[2]uint64][]bool
}

func newUnreach() *unreach {
	return &unreach{calls: make(map[[2]uint64]int), snaps: make(map[[2]uint64][]bool)}
}

func (u *unreach) unreachable(group, peer uint64) {
	u.mu.Lock()
	u.calls[[2]uint64{group, peer}]++
	u.mu.Unlock()
}

func (u *unreach) snapshot(group, peer uint64, failed bool) {
	u.mu.Lock()
	u.snaps[[2]uint64{group, peer}] = append(u.snaps[[2]uint64{group, peer}], failed)
	u.mu.Unlock()
}

func (u *unreach) called(group, peer uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[[2]uint64{group, peer}] > 0
}

func (u *unreach) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, v := range u.calls {
		n += v
	}
	return n
}

func (u *unreach) snapStatus(group, peer uint64) []bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]bool(nil), u.snaps[[2]uint64{group, peer}]...)
}

// tnode is a test transport with its sinks.
type tnode struct {
	*Transport
	id   uint64
	addr string
	recv *collector
	un   *unreach
	logs *logBuf
}

func listen(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// startNode starts a transport for id on ln with the given address book.
func startNode(t testing.TB, id uint64, ln net.Listener, peers map[uint64]string, opts ...func(*Config)) *tnode {
	n := &tnode{id: id, recv: newCollector(), un: newUnreach(), logs: &logBuf{}}
	if ln != nil {
		n.addr = ln.Addr().String()
	}
	cfg := Config{
		NodeID:         id,
		ClusterID:      testCluster,
		Listener:       ln,
		Peers:          peers,
		Handler:        n.recv.handle,
		Unreachable:    n.un.unreachable,
		SnapshotStatus: n.un.snapshot,
		Logger:         slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n.Transport = New(cfg)
	require.NoError(t, n.Start())
	t.Cleanup(func() {
		_ = n.Close()
		if t.Failed() {
			t.Logf("logs of node %d:\n%s", id, n.logs.String())
		}
	})
	return n
}

// cluster starts n fully connected transports with ids 1..n.
func cluster(t testing.TB, n int, opts ...func(*Config)) []*tnode {
	lns := make([]net.Listener, n)
	book := make(map[uint64]string, n)
	for i := range lns {
		lns[i] = listen(t)
		book[uint64(i+1)] = lns[i].Addr().String()
	}
	nodes := make([]*tnode, n)
	for i := range nodes {
		nodes[i] = startNode(t, uint64(i+1), lns[i], book, opts...)
	}
	return nodes
}

func msg(typ raftpb.MessageType, from, to, index uint64, payload []byte) *raftpb.Message {
	m := &raftpb.Message{
		Type:  typ.Enum(),
		From:  proto.Uint64(from),
		To:    proto.Uint64(to),
		Term:  proto.Uint64(7),
		Index: proto.Uint64(index),
	}
	if payload != nil {
		if typ == raftpb.MsgSnap {
			m.Snapshot = &raftpb.Snapshot{
				Data:     payload,
				Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(7)},
			}
		} else {
			m.Entries = []*raftpb.Entry{{Term: proto.Uint64(7), Index: proto.Uint64(index + 1), Data: payload}}
		}
	}
	return m
}

// checkGoroutines fails the test if, after cleanup, more goroutines remain
// than when it was called. Call it first so its cleanup runs last.
// (go.uber.org/goleak is not a module dependency, so count instead.)
func checkGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d goroutines, %d before\n%s", n, base, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// checkSeq asserts that the received records have strictly increasing
// indexes; with exact, that they are exactly 0..want-1.
func checkSeq(t testing.TB, rs []rec, want int, exact bool) {
	t.Helper()
	if exact {
		require.Len(t, rs, want)
	}
	prev := int64(-1)
	for i, r := range rs {
		idx := int64(r.m.GetIndex())
		if exact && idx != int64(i) {
			t.Fatalf("message %d has index %d: reordered or lost", i, idx)
		}
		if idx <= prev {
			t.Fatalf("message %d has index %d after %d: reordered", i, idx, prev)
		}
		prev = idx
	}
}
