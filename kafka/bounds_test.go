package kafka_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

// Every port is hostile input: what one client can make the server hold
// is bounded by what it actually sends, and the server stays up.

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Connections that announce 100 MiB frames and send nothing more cost
// almost nothing: the buffer grows as bytes arrive (the server used to
// allocate the announced length: 5 such connections added 501 MiB).
func TestAnnouncedFrameLengthIsNotAllocated(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{})
	before := heapInUse()
	const conns = 20
	for range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(binary.BigEndian.AppendUint32(nil, 100<<20))
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond) // the readers have the lengths
	perConn := (int64(heapInUse()) - int64(before)) / conns
	t.Logf("heap added per connection announcing a 100 MiB frame: %d bytes", perConn)
	require.Less(t, perConn, int64(256<<10))
}

// A client that starts a request and stalls is cut off after
// RequestReadTimeout; one that sends nothing, after IdleTimeout.
func TestStalledAndIdleConnectionsAreClosed(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{RequestReadTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond})
	stalled, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer stalled.Close()
	_, err = stalled.Write(append(binary.BigEndian.AppendUint32(nil, 1000), 0, 3)) // 2 of 1000 bytes
	require.NoError(t, err)
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	start := time.Now()
	requireClosed(t, stalled)
	require.Less(t, time.Since(start), 2*time.Second)
	requireClosed(t, idle)
	require.Less(t, time.Since(start), 3*time.Second)
}

// No more than MaxConnectionsPerIP connections from one address.
func TestConnectionsPerAddress(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{MaxConnectionsPerIP: 2})
	var ok []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		ok = append(ok, c)
	}
	third, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer third.Close()
	requireClosed(t, third)
	// The first two still work.
	for i, c := range ok {
		req := kmsg.NewPtrApiVersionsRequest()
		writeFrame(t, c, encodeRequest(req, int32(i+1)))
		readResponseFrame(t, c)
	}
}

// fetchFrame encodes a fetch of stream "a" from offset 0 naming the
// partition n times.
func fetchFrame(v int16, n int, partitionMax int32) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(v)
	req.ReplicaID = -1
	req.MaxBytes = 1 << 30
	req.SessionEpoch = -1
	tp := kmsg.NewFetchRequestTopic()
	tp.Topic = "a"
	for range n {
		p := kmsg.NewFetchRequestTopicPartition()
		p.PartitionMaxBytes = partitionMax
		p.LogStartOffset = -1
		p.CurrentLeaderEpoch = -1
		tp.Partitions = append(tp.Partitions, p)
	}
	req.Topics = append(req.Topics, tp)
	return encodeRequest(req, 7)
}

func readResponseFrame(t *testing.T, c net.Conn) []byte {
	t.Helper()
	// Generous: a 45,000-topic Metadata takes seconds under -race on a
	// busy 2-core machine; the tests are about sizes, not speed.
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	var l [4]byte
	_, err := io.ReadFull(br, l[:])
	require.NoError(t, err)
	body := make([]byte, binary.BigEndian.Uint32(l[:]))
	_, err = io.ReadFull(br, body)
	require.NoError(t, err)
	return body
}

// A fetch naming one partition 100 times gets its data once (the others
// INVALID_REQUEST), and the server's cap holds in every version: the
// response of a 1.6 KB request used to be 100 times the data.
func TestFetchResponsesAreBounded(t *testing.T) {
	addr, be := startRaw(t, kafka.Config{FetchMaxBytes: 256 << 10})
	for i := range 64 { // 64 batches of ~16 KiB: 1 MiB
		b := makeBatch(t, 0, -1, int64(i), strings.Repeat("x", 16<<10))
		be.Produce("a", kafka.Records{Batches: b, Offsets: 1}, func(kafka.Produced, error) {})
	}
	for _, v := range []int16{2, 4, 11} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		writeFrame(t, c, fetchFrame(v, 100, 1<<20))
		body := readResponseFrame(t, c)
		c.Close()
		t.Logf("fetch v%d naming the partition 100 times: %d-byte response", v, len(body))
		require.Less(t, len(body), 256<<10+32<<10, "v%d: the server's fetch cap plus one batch", v)
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		require.NoError(t, resp.ReadFrom(body[4:]))
		ps := resp.Topics[0].Partitions
		require.Len(t, ps, 100)
		require.Equal(t, int16(0), ps[0].ErrorCode)
		require.NotEmpty(t, ps[0].RecordBatches)
		for _, p := range ps[1:] {
			require.Equal(t, int16(42), p.ErrorCode, "a repeated partition is INVALID_REQUEST")
			require.Empty(t, p.RecordBatches)
		}
	}
}

// Out of file descriptors, the server backs off and keeps accepting once
// some are free (it used to stop serving for good).
func TestAcceptSurvivesRunningOutOfFileDescriptors(t *testing.T) {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	addr, _ := startRaw(t, kafka.Config{})
	open := openFDs(t)
	low := lim
	low.Cur = uint64(open + 12)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
		}
	}
	defer restore()
	var conns []net.Conn
	for range 20 { // more than the limit leaves: accept fails with EMFILE
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond)
	for _, c := range conns {
		_ = c.Close()
	}
	restore()
	// The server still serves.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		writeFrame(t, c, encodeRequest(kmsg.NewPtrApiVersionsRequest(), 1))
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var l [4]byte
		_, err = io.ReadFull(c, l[:])
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// With a server-wide budget smaller than two requests, a second client's
// request waits (its socket is not read) until the first is answered, then
// goes through: backpressure, nothing dropped; the budget is all given
// back.
func TestRequestBudgetBackpressure(t *testing.T) {
	addr, be, srv := startRawServer(t, kafka.Config{MaxRequestBytes: 96 << 10})
	be.SetManual(true) // produces wait for a commit the test gives
	value := strings.Repeat("v", 64<<10)
	var conns []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		writeFrame(t, c, encodeRequest(produceReq(8, -1, "a", makeBatch(t, 0, -1, int64(i), value)), 1))
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return be.PendingCount() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the first produce is in; the second waits for budget")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, be.PendingCount(), "the second request is not read while the first holds the budget")
	held := srv.RequestBytesHeld()
	require.LessOrEqual(t, held, int64(96<<10)+int64(64<<10), "one request beyond the budget at most: the first, whole, and what the second had read")
	for _, p := range be.TakePending() {
		p.Commit()
	}
	readResponseFrame(t, conns[0])
	require.Eventually(t, func() bool {
		for _, p := range be.TakePending() {
			p.Commit()
		}
		return srv.RequestBytesHeld() == 0
	}, 5*time.Second, 10*time.Millisecond)
	readResponseFrame(t, conns[1])
}

// Frames read at the same time never deadlock on the budget: each
// connection reserves its frame's whole length before reading the body.
// (Reserving as the bytes arrived, three connections that had each sent
// part of a 64 KiB produce held 84 KiB of a 96 KiB budget between them and
// all waited for the rest for ever.)
func TestRequestBudgetNoDeadlockBetweenPartialFrames(t *testing.T) {
	addr, be, srv := startRawServer(t, kafka.Config{MaxRequestBytes: 96 << 10})
	value := strings.Repeat("v", 64<<10)
	var conns []net.Conn
	var frames [][]byte
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		f := encodeRequest(produceReq(8, -1, "a", makeBatch(t, 0, -1, int64(i), value)), 1)
		frames = append(frames, binary.BigEndian.AppendUint32(nil, uint32(len(f))))
		frames[i] = append(frames[i], f...)
		conns = append(conns, c)
	}
	// Every connection sends the first 30 KiB, then the rest.
	for i, c := range conns {
		_, err := c.Write(frames[i][:30<<10])
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond)
	for i, c := range conns {
		go func() { _, _ = c.Write(frames[i][30<<10:]) }()
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		readResponseFrame(t, c)
	}
	require.Eventually(t, func() bool { return srv.RequestBytesHeld() == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(3), be.StreamByName("a").EndOffset(), "all three produces landed")
}
