package transport

import (
	"bufio"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// An authenticated TLS stream gathers its records into batches beneath
// TLS: sending 1 MiB appends costs a few write and read system calls per
// MiB, where crypto/tls alone makes one write per 16 KiB record and reads
// one or two records at a time (counted by the kernel: /proc/self/io).
func TestTLSRecordsTravelInBatches(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io here")
	}
	var recv atomic.Int64
	p := newTestPKI(t, 1, 2)
	nodes := secureCluster(t, p, 2, func(c *Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Handler = func(group uint64, m *raftpb.Message) { recv.Add(1) }
	})
	m := msg(raftpb.MsgApp, 1, 2, 1, make([]byte, 1<<20))
	nodes[0].Send(1, m) // dialed and handshaken before counting
	require.Eventually(t, func() bool { return recv.Load() == 1 }, 5*time.Second, time.Millisecond)

	const n = 32
	r0, w0 := syscallsIO(t)
	for i := range n {
		nodes[0].Send(1, m)
		require.Eventually(t, func() bool { return recv.Load() == int64(i+2) }, 5*time.Second, 100*time.Microsecond)
	}
	r1, w1 := syscallsIO(t)
	reads, writes := float64(r1-r0)/n, float64(w1-w0)/n
	t.Logf("per 1 MiB append: %.1f reads, %.1f writes", reads, writes)
	require.LessOrEqual(t, writes, 16.0, "write system calls per MiB")
	require.LessOrEqual(t, reads, 16.0, "read system calls per MiB")
}

// syscallsIO is the process's read and write system calls so far.
func syscallsIO(t *testing.T) (reads, writes int64) {
	f, err := os.Open("/proc/self/io")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	require.NoError(t, sc.Err())
	return reads, writes
}

// Closing a transport interrupts a stream blocked writing its batch to a
// peer that stopped reading: at once, not after the 5 s crypto/tls gives
// its close_notify alert (the batch is written beneath TLS, outside a
// TLS write that Close would interrupt).
func TestCloseInterruptsABlockedBatch(t *testing.T) {
	stuck := make(chan struct{})
	var recv atomic.Int64
	p := newTestPKI(t, 1, 2)
	nodes := secureCluster(t, p, 2, func(c *Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Handler = func(group uint64, m *raftpb.Message) {
			if recv.Add(1) > 1 {
				<-stuck // the reader stops: the sender's socket fills up
			}
		}
	})
	defer close(stuck)
	m := msg(raftpb.MsgApp, 1, 2, 1, make([]byte, 100<<10))
	nodes[0].Send(1, m)
	require.Eventually(t, func() bool { return recv.Load() == 1 }, 5*time.Second, time.Millisecond)
	// One frame per batch, until the sockets' buffers are full and the
	// sender waits in its flush.
	for sent := nodes[0].Stats()[2].SentBytes; ; {
		for range 20 {
			nodes[0].Send(1, m)
			time.Sleep(time.Millisecond)
		}
		now := nodes[0].Stats()[2].SentBytes
		if now == sent {
			break
		}
		sent = now
	}
	start := time.Now()
	require.NoError(t, nodes[0].Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close of a transport blocked writing")
}
