package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const waitFor = 10 * time.Second

func TestFrameRoundTrip(t *testing.T) {
	m := msg(raftpb.MsgApp, 1, 2, 42, []byte("hello"))
	bp, err := encodeFrame(9, 1, m, proto.Size(m))
	require.NoError(t, err)
	b := *bp
	sealFrame(b)
	require.Equal(t, uint32(len(b)-8), binary.BigEndian.Uint32(b[0:]))
	require.Equal(t, crc32.Checksum(b[8:], castagnoli), binary.BigEndian.Uint32(b[4:]))

	fr := frameReader{r: bytes.NewReader(b), maxFrame: 1 << 20}
	group, from, payload, err := fr.next()
	require.NoError(t, err)
	require.Equal(t, uint64(9), group)
	require.Equal(t, uint64(1), from)
	got := new(raftpb.Message)
	require.NoError(t, proto.Unmarshal(payload, got))
	require.True(t, proto.Equal(m, got))
	_, _, _, err = fr.next()
	require.ErrorIs(t, err, io.EOF)

	// Truncated body is an unexpected EOF, not a clean one.
	fr = frameReader{r: bytes.NewReader(b[:len(b)-1]), maxFrame: 1 << 20}
	_, _, _, err = fr.next()
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestTwoPeersManyGroups(t *testing.T) {
	checkGoroutines(t)
	nodes := cluster(t, 2)
	const n, groups = 20000, 64
	var wg sync.WaitGroup
	for _, src := range nodes {
		dst := 3 - src.id
		wg.Go(func() {
			for i := range n {
				src.Send(uint64(i%groups), msg(raftpb.MsgApp, src.id, dst, uint64(i), []byte("payload")))
			}
		})
	}
	wg.Wait()
	for _, nd := range nodes {
		require.Eventually(t, func() bool { return nd.recv.count() == n }, waitFor, 5*time.Millisecond)
		rs := nd.recv.from(3 - nd.id)
		checkSeq(t, rs, n, true)
		for _, r := range rs {
			if r.group != r.m.GetIndex()%groups || string(r.m.GetEntries()[0].GetData()) != "payload" {
				t.Fatalf("message %d: group %d, entries %v", r.m.GetIndex(), r.group, r.m.GetEntries())
			}
		}
		// The sender counts a frame once its write returns, which can be
		// after the peer has read it: wait for the counters to settle.
		require.Eventually(t, func() bool { return nd.Stats()[3-nd.id].SentFrames == uint64(n) }, waitFor, 5*time.Millisecond)
		st := nd.Stats()[3-nd.id]
		require.True(t, st.Connected)
		require.True(t, st.Inbound)
		require.Equal(t, uint64(n), st.RecvFrames)
		require.Zero(t, st.Dropped)
		require.Zero(t, nd.un.total())
	}
}

func TestThreePeersAllToAll(t *testing.T) {
	checkGoroutines(t)
	nodes := cluster(t, 3)
	const n, groups = 5000, 100
	var wg sync.WaitGroup
	for _, src := range nodes {
		for _, dst := range nodes {
			if src == dst {
				continue
			}
			wg.Go(func() {
				for i := range n {
					src.Send(uint64(i*7%groups), msg(raftpb.MsgHeartbeat, src.id, dst.id, uint64(i), nil))
				}
			})
		}
	}
	wg.Wait()
	for _, dst := range nodes {
		require.Eventually(t, func() bool { return dst.recv.count() == 2*n }, waitFor, 5*time.Millisecond)
		for _, src := range nodes {
			if src != dst {
				checkSeq(t, dst.recv.from(src.id), n, true)
			}
		}
	}
	for _, nd := range nodes {
		for id, st := range nd.Stats() {
			require.Zero(t, st.Dropped, "node %d -> %d", nd.id, id)
		}
	}
}

func TestLargeMessages(t *testing.T) {
	checkGoroutines(t)
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	big := bytes.Repeat([]byte("0123456789abcdef"), (20<<20)/16) // 20 MiB snapshot
	a.Send(5, msg(raftpb.MsgSnap, 1, 2, 0, big))
	for i := 1; i <= 8; i++ {
		a.Send(uint64(i), msg(raftpb.MsgApp, 1, 2, uint64(i), bytes.Repeat([]byte{byte(i)}, 1<<20)))
	}
	require.Eventually(t, func() bool { return b.recv.count() == 9 }, waitFor, 5*time.Millisecond)
	rs := b.recv.from(1)
	checkSeq(t, rs, 9, true)
	require.Equal(t, raftpb.MsgSnap, rs[0].m.GetType())
	require.True(t, bytes.Equal(big, rs[0].m.GetSnapshot().GetData()))
	for i := 1; i <= 8; i++ {
		require.True(t, bytes.Equal(bytes.Repeat([]byte{byte(i)}, 1<<20), rs[i].m.GetEntries()[0].GetData()))
	}
	require.Eventually(t, func() bool { return len(a.un.snapStatus(5, 2)) == 1 }, waitFor, 5*time.Millisecond)
	require.Equal(t, []bool{false}, a.un.snapStatus(5, 2))
}

func TestTooLargeForSenderOrReceiver(t *testing.T) {
	checkGoroutines(t)
	la, lb := listen(t), listen(t)
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	a := startNode(t, 1, la, book, func(c *Config) { c.MaxFrameBytes = 4 << 20 })
	b := startNode(t, 2, lb, book, func(c *Config) { c.MaxFrameBytes = 1 << 20 })

	// Over the sender's own limit: dropped in Send.
	a.Send(3, msg(raftpb.MsgSnap, 1, 2, 0, make([]byte, 5<<20)))
	require.Eventually(t, func() bool { return a.un.called(3, 2) }, waitFor, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(a.un.snapStatus(3, 2)) == 1 }, waitFor, 5*time.Millisecond)
	require.Equal(t, []bool{true}, a.un.snapStatus(3, 2))

	// Within ours but over the peer's advertised limit: dropped by the writer
	// instead of killing the stream; later messages still flow.
	a.Send(4, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
	require.Eventually(t, func() bool { return b.recv.count() == 1 }, waitFor, 5*time.Millisecond)
	a.Send(4, msg(raftpb.MsgApp, 1, 2, 1, make([]byte, 2<<20)))
	a.Send(4, msg(raftpb.MsgHeartbeat, 1, 2, 2, nil))
	require.Eventually(t, func() bool { return b.recv.count() == 2 }, waitFor, 5*time.Millisecond)
	require.Equal(t, uint64(2), b.recv.from(1)[1].m.GetIndex())
	require.True(t, a.un.called(4, 2))
	require.Equal(t, uint64(2), a.Stats()[2].Dropped)
	require.Zero(t, a.Stats()[2].Reconnects)
	require.False(t, b.logs.contains("level=WARN"), b.logs.String())
}

func TestPeerRestartReconnects(t *testing.T) {
	checkGoroutines(t)
	la, lb := listen(t), listen(t)
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	a := startNode(t, 1, la, book)
	b := startNode(t, 2, lb, book)

	idx := uint64(0)
	send := func() { a.Send(idx%10, msg(raftpb.MsgApp, 1, 2, idx, []byte("x"))); idx++ }
	for range 100 {
		send()
	}
	require.Eventually(t, func() bool { return b.recv.count() == 100 }, waitFor, 5*time.Millisecond)
	checkSeq(t, b.recv.from(1), 100, true)

	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { return !a.Stats()[2].Connected }, waitFor, 5*time.Millisecond)

	// Restart node 2 on the same address.
	ln, err := net.Listen("tcp", book[2])
	require.NoError(t, err)
	b2 := startNode(t, 2, ln, book)
	require.Eventually(t, func() bool {
		send()
		return b2.recv.count() > 0
	}, waitFor, 5*time.Millisecond)
	want := b2.recv.count() + 1000
	for range 1000 {
		send()
	}
	require.Eventually(t, func() bool { return b2.recv.count() >= want }, waitFor, 5*time.Millisecond)
	checkSeq(t, b2.recv.from(1), 0, false)
	st := a.Stats()[2]
	require.True(t, st.Connected)
	require.GreaterOrEqual(t, st.Reconnects, uint64(1))
	require.True(t, a.logs.contains("stream to peer broken"), a.logs.String())
}

func TestPeerDownDropsAndReportsUnreachable(t *testing.T) {
	checkGoroutines(t)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	a := startNode(t, 1, listen(t), map[uint64]string{2: deadAddr})

	require.Eventually(t, func() bool {
		for g := range uint64(3) {
			a.Send(g, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
		}
		return a.un.called(0, 2) && a.un.called(1, 2) && a.un.called(2, 2)
	}, waitFor, 5*time.Millisecond)
	st := a.Stats()[2]
	require.False(t, st.Connected)
	require.NotZero(t, st.Dropped)
	require.NotZero(t, st.DialFailures)
	require.Zero(t, st.QueuedBytes)
	require.Zero(t, st.SentFrames)
	require.True(t, a.logs.contains("cannot connect to peer"))

	// Unknown peers are reported too.
	a.Send(9, msg(raftpb.MsgHeartbeat, 1, 77, 0, nil))
	require.Eventually(t, func() bool { return a.un.called(9, 77) }, waitFor, 5*time.Millisecond)
}

func TestQueueBoundRespected(t *testing.T) {
	checkGoroutines(t)
	const bound = 2 << 20
	la, lb := listen(t), listen(t)
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	a := startNode(t, 1, la, book, func(c *Config) {
		c.MaxQueuedBytes = bound
		c.MaxFrameBytes = 1 << 20
	})
	unblock := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	defer release()
	b := startNode(t, 2, lb, book, func(c *Config) {
		inner := c.Handler
		c.Handler = func(g uint64, m *raftpb.Message) {
			<-unblock // a stuck receiver: the stream backs up
			inner(g, m)
		}
	})
	t.Cleanup(release) // runs before b's Close

	// Warm up the connection.
	a.Send(0, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
	require.Eventually(t, func() bool { return a.Stats()[2].Connected }, waitFor, 5*time.Millisecond)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	payload := make([]byte, 64<<10)
	const n = 4000 // ~256 MiB offered, far over the bound
	maxQueued := int64(0)
	for i := 1; i <= n; i++ {
		a.Send(uint64(i%8), msg(raftpb.MsgApp, 1, 2, uint64(i), payload))
		maxQueued = max(maxQueued, a.Stats()[2].QueuedBytes)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := a.Stats()[2]
	require.LessOrEqual(t, maxQueued, int64(bound))
	require.Greater(t, st.Dropped, uint64(n/2), "most messages must be dropped")
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, growth, int64(32<<20), "heap grew by %d bytes", growth)
	require.Eventually(t, func() bool { return a.un.total() > 0 }, waitFor, 5*time.Millisecond)
	t.Logf("offered %d MiB, max queued %d KiB, dropped %d, heap growth %d KiB",
		n*len(payload)>>20, maxQueued>>10, st.Dropped, growth>>10)

	// Let the receiver go: what was not dropped arrives in order.
	release()
	delivered := uint64(n+1) - st.Dropped
	require.Eventually(t, func() bool { return uint64(b.recv.count()) == delivered }, waitFor, 5*time.Millisecond)
	checkSeq(t, b.recv.from(1), 0, false)
	require.Eventually(t, func() bool { return a.Stats()[2].QueuedBytes == 0 }, waitFor, 5*time.Millisecond)
}

func TestSetAndRemovePeer(t *testing.T) {
	checkGoroutines(t)
	la, lb, lc := listen(t), listen(t), listen(t)
	a := startNode(t, 1, la, map[uint64]string{})
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String()})
	c := startNode(t, 3, lc, map[uint64]string{1: la.Addr().String()})

	// b is not in a's book yet: a rejects b's stream.
	b.Send(1, msg(raftpb.MsgHeartbeat, 2, 1, 0, nil))
	require.Eventually(t, func() bool { return a.logs.contains("unknown sender node 2") }, waitFor, 5*time.Millisecond)
	require.Eventually(t, func() bool { return b.logs.contains("node 1 refuses our stream: unknown sender node 2") }, waitFor, 5*time.Millisecond)

	a.SetPeer(2, lb.Addr().String())
	require.Eventually(t, func() bool {
		b.Send(1, msg(raftpb.MsgHeartbeat, 2, 1, 0, nil))
		return a.recv.count() > 0
	}, waitFor, 5*time.Millisecond)

	// Re-point peer 2's address at node 3: node 3 refuses a stream meant for
	// node 2, and a sees that the address is wrong.
	a.SetPeer(3, lc.Addr().String())
	a.SetPeer(2, lc.Addr().String())
	require.Eventually(t, func() bool {
		a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
		return c.logs.contains("addressed to node 2 but this is node 3")
	}, waitFor, 5*time.Millisecond)
	require.Zero(t, b.recv.count())

	a.RemovePeer(2)
	_, ok := a.Stats()[2]
	require.False(t, ok)
	a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
	require.Eventually(t, func() bool { return a.un.called(1, 2) }, waitFor, 5*time.Millisecond)
	// b's stream to a was closed, and b may not come back.
	require.Eventually(t, func() bool { return a.logs.contains("reason=\"peer removed\"") }, waitFor, 5*time.Millisecond)
	n := a.recv.count()
	for range 20 {
		b.Send(1, msg(raftpb.MsgHeartbeat, 2, 1, 0, nil))
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, n, a.recv.count())
}

func TestClusterIDMismatchRejected(t *testing.T) {
	checkGoroutines(t)
	la, lb := listen(t), listen(t)
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	a := startNode(t, 1, la, book, func(c *Config) { c.ClusterID = 999 })
	b := startNode(t, 2, lb, book)
	a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
	require.Eventually(t, func() bool {
		return b.logs.contains("cluster id mismatch: peer is in cluster 999")
	}, waitFor, 5*time.Millisecond)
	require.Eventually(t, func() bool { return a.logs.contains("node 2 refuses our stream: cluster id mismatch") }, waitFor, 5*time.Millisecond)
	require.Zero(t, b.recv.count())
}

// A peer that comes back with another data dir (a wiped disk) is refused on
// both ends of a stream, and told why.
func TestPeerWithAnotherDataDirRefused(t *testing.T) {
	checkGoroutines(t)
	la, lb := listen(t), listen(t)
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	known := map[uint64]uint64{1: 11, 2: 22}
	var mu sync.Mutex
	check := func(node, dir uint64) error {
		mu.Lock()
		defer mu.Unlock()
		if known[node] != dir {
			return fmt.Errorf("node %d presents data dir %d, known %d", node, dir, known[node])
		}
		return nil
	}
	a := startNode(t, 1, la, book, func(c *Config) { c.DirID, c.CheckPeer = 11, check })
	b := startNode(t, 2, lb, book, func(c *Config) { c.DirID, c.CheckPeer = 99, check }) // wiped: was 22
	a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
	b.Send(1, msg(raftpb.MsgHeartbeat, 2, 1, 0, nil))
	require.Eventually(t, func() bool {
		return a.logs.contains("node 2 presents data dir 99, known 22") && b.logs.contains("node 1 refuses our stream: node 2 presents data dir 99, known 22")
	}, waitFor, 5*time.Millisecond, a.logs.String())
	require.Zero(t, a.recv.count())
	require.Zero(t, b.recv.count())
}

// rawClient connects to n pretending to be node from, with a hand-made
// handshake; it returns the connection, whether n accepted the stream and
// the reason it gave if it refused it.
func rawClient(t *testing.T, n *tnode, hs []byte) (net.Conn, bool, string) {
	t.Helper()
	c, err := net.Dial("tcp", n.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Write(hs)
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	reply, err := readHandshake(c)
	if err != nil {
		return c, false, ""
	}
	require.Equal(t, n.id, reply.From)
	if reply.Flags&flagRejected != 0 {
		return c, false, readReason(c)
	}
	return c, true, ""
}

// requireClosed asserts the peer closes c.
func requireClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	_, err := io.Copy(io.Discard, c)
	require.NoError(t, err, "expected the transport to close the connection")
}

func goodHandshake(from, to uint64) []byte {
	return handshake{Version: protocolVersion, ClusterID: testCluster, From: from, To: to, MaxFrame: 1 << 20}.marshal()
}

func rawFrame(group, from uint64, payload []byte) []byte {
	b := make([]byte, frameOverheadLen, frameOverheadLen+len(payload))
	binary.BigEndian.PutUint64(b[8:], group)
	binary.BigEndian.PutUint64(b[16:], from)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-frameHeaderLen))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[frameHeaderLen:], castagnoli))
	return b
}

func TestProtocolViolationsCloseConnection(t *testing.T) {
	checkGoroutines(t)
	const maxFrame = 1 << 20
	b := startNode(t, 2, listen(t), map[uint64]string{1: "127.0.0.1:1"}, func(c *Config) {
		c.MaxFrameBytes = maxFrame
		c.HandshakeTimeout = 2 * time.Second
	})
	good, err := proto.Marshal(msg(raftpb.MsgApp, 1, 2, 1, []byte("ok")))
	require.NoError(t, err)

	hsCases := []struct {
		name   string
		hs     []byte
		reason string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, 40))), `bad handshake magic \"GET \"`},
		{"version", handshake{Version: 9, ClusterID: testCluster, From: 1, To: 2}.marshal(), "unsupported protocol version 9"},
		{"cluster", handshake{Version: protocolVersion, ClusterID: 5, From: 1, To: 2}.marshal(), "cluster id mismatch"},
		{"unknown sender", goodHandshake(42, 2), "unknown sender node 42"},
		{"wrong receiver", goodHandshake(1, 3), "addressed to node 3 but this is node 2"},
		{"self", goodHandshake(2, 2), "invalid sender node id 2"},
	}
	for _, tc := range hsCases {
		t.Run("handshake/"+tc.name, func(t *testing.T) {
			c, accepted, why := rawClient(t, b, tc.hs)
			require.False(t, accepted)
			if tc.name != "garbage" {
				require.Contains(t, why, tc.reason, "the refusal names the reason")
			}
			requireClosed(t, c)
			require.Eventually(t, func() bool { return b.logs.contains(tc.reason) }, waitFor, 5*time.Millisecond, b.logs.String())
		})
	}

	crcBad := rawFrame(1, 1, good)
	crcBad[len(crcBad)-1] ^= 0xff
	oversized := make([]byte, 8)
	binary.BigEndian.PutUint32(oversized, maxFrame+1)
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	short := rawFrame(1, 1, nil)[:frameHeaderLen]
	binary.BigEndian.PutUint32(short, 3)
	frameCases := []struct {
		name   string
		data   []byte
		reason string
	}{
		{"crc", crcBad, "frame crc mismatch"},
		{"oversized", oversized, "frame length 1048577 exceeds MaxFrameBytes 1048576"},
		{"huge", huge, "frame length 4294967295 exceeds MaxFrameBytes"},
		{"short", short, "frame length 3 shorter than"},
		{"decode", rawFrame(1, 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff}), "cannot decode raft message (group 1)"},
		{"from mismatch", rawFrame(1, 3, good), "frame claims sender node 3 on the stream of node 1"},
		{"misrouted", rawFrame(1, 1, mustMarshal(t, msg(raftpb.MsgApp, 1, 4, 1, nil))), "message for node 4 arrived at node 2"},
		{"truncated", rawFrame(1, 1, good)[:20], "unexpected EOF"},
	}
	for _, tc := range frameCases {
		t.Run("frame/"+tc.name, func(t *testing.T) {
			before := b.recv.count()
			c, answered, _ := rawClient(t, b, goodHandshake(1, 2))
			require.True(t, answered)
			// One good frame first: the stream works until the bad one.
			_, err := c.Write(rawFrame(1, 1, good))
			require.NoError(t, err)
			_, err = c.Write(tc.data)
			require.NoError(t, err)
			if tc.name == "truncated" {
				require.NoError(t, c.(*net.TCPConn).CloseWrite())
			}
			requireClosed(t, c)
			require.Eventually(t, func() bool { return b.logs.contains(tc.reason) }, waitFor, 5*time.Millisecond, b.logs.String())
			require.Equal(t, before+1, b.recv.count())
		})
	}
	require.True(t, b.logs.contains("peer=1"))
}

func mustMarshal(t *testing.T, m *raftpb.Message) []byte {
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestCloseIsClean(t *testing.T) {
	checkGoroutines(t)
	nodes := cluster(t, 3)
	start := time.Now()
	defer func() { t.Logf("test body took %v", time.Since(start)) }()
	for i := range 1000 {
		for _, src := range nodes {
			for _, dst := range nodes {
				if src != dst {
					src.Send(uint64(i%4), msg(raftpb.MsgApp, src.id, dst.id, uint64(i), []byte("data")))
				}
			}
		}
	}
	// Close mid-traffic; Close twice; Send and Stats after Close are safe.
	for _, n := range nodes {
		start := time.Now()
		require.NoError(t, n.Close())
		t.Logf("node %d closed in %v", n.id, time.Since(start))
		require.NoError(t, n.Close())
		n.Send(1, msg(raftpb.MsgApp, n.id, 2, 0, nil))
		_ = n.Stats()
	}
	// A transport that was never started can be closed too.
	require.NoError(t, New(Config{NodeID: 1, Listener: listen(t)}).Close())
}

func TestStartValidates(t *testing.T) {
	require.Error(t, New(Config{Handler: func(uint64, *raftpb.Message) {}}).Start())
	require.Error(t, New(Config{NodeID: 1}).Start())
}

func TestSetPeerWakesBackoff(t *testing.T) {
	checkGoroutines(t)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	la, lb := listen(t), listen(t)
	slow := func(c *Config) { c.MinBackoff, c.MaxBackoff = 30*time.Second, 30*time.Second }
	a := startNode(t, 1, la, map[uint64]string{2: deadAddr}, slow)
	b := startNode(t, 2, lb, map[uint64]string{1: la.Addr().String()}, slow)
	require.Eventually(t, func() bool { return a.Stats()[2].DialFailures > 0 }, waitFor, 5*time.Millisecond)
	// a is now sleeping a 15-30s backoff; a new address must cut it short.
	a.SetPeer(2, lb.Addr().String())
	require.Eventually(t, func() bool {
		a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 0, nil))
		return b.recv.count() > 0
	}, 5*time.Second, 5*time.Millisecond)
}
