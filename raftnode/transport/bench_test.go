package transport

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/selfcpu"
)

// BenchmarkThroughput streams MsgApp messages with one entry of the given
// payload from node 1 to node 2 over loopback, keeping at most ~16 MiB in
// flight so that nothing is dropped, and then, in the same run, writes and
// reads the same number of identical frames over a raw loopback TCP
// connection (bufio writer, one io.ReadFull per frame on the reader). It
// reports msgs/s and MB/s (wire bytes) for both and their ratio.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("payload=%dKiB", size>>10), func(b *testing.B) { benchThroughput(b, size) })
	}
}

func benchThroughput(b *testing.B, size int) {
	var recv atomic.Int64
	progress := make(chan struct{}, 1)
	nodes := cluster(b, 2, func(c *Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Handler = func(group uint64, m *raftpb.Message) {
			if n := recv.Add(1); n%64 == 0 {
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
	})
	a := nodes[0]
	m := msg(raftpb.MsgApp, 1, 2, 1, make([]byte, size))
	bp, err := encodeFrame(1, 1, m, proto.Size(m))
	if err != nil {
		b.Fatal(err)
	}
	sealFrame(*bp)
	frame := append([]byte(nil), *bp...)
	window := int64(max(256, (16<<20)/len(frame)))
	wait := func(cond func() bool) {
		for !cond() {
			select {
			case <-progress:
			case <-time.After(time.Millisecond):
			}
		}
	}
	// Warm up the stream so that dialing is not measured.
	a.Send(1, m)
	wait(func() bool { return recv.Load() == 1 })
	recv.Store(0)

	elapsed := sendWindowed(b, a, m, window, &recv, wait)

	raw := rawLoopback(b, frame, b.N)
	mb := float64(b.N) * float64(len(frame)) / 1e6
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(mb/elapsed.Seconds(), "MB/s")
	b.ReportMetric(float64(b.N)/raw.Seconds(), "raw_msgs/s")
	b.ReportMetric(mb/raw.Seconds(), "raw_MB/s")
	b.ReportMetric(raw.Seconds()/elapsed.Seconds(), "ratio")
}

// rawLoopback writes frame n times to a loopback TCP connection and reads
// them back, one frame per read; it returns the elapsed time.
func rawLoopback(b *testing.B, frame []byte, n int) time.Duration {
	ln := listen(b)
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		r := bufio.NewReaderSize(c, readBufSize)
		buf := make([]byte, len(frame))
		for range n {
			if _, err := io.ReadFull(r, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	w := bufio.NewWriterSize(c, writeBufSize)
	for range n {
		if _, err := w.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkTLSAppends streams appends of one 1 MiB entry from node 1 to
// node 2 over mutual TLS (the servers' default), at most 16 MiB in flight,
// and reports MB/s and the process's CPU per MB (both ends: encryption,
// decryption, the system calls).
func BenchmarkTLSAppends(b *testing.B) {
	var recv atomic.Int64
	progress := make(chan struct{}, 1)
	p := newTestPKI(b, 1, 2)
	nodes := secureCluster(b, p, 2, func(c *Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Handler = func(group uint64, m *raftpb.Message) {
			recv.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	})
	a := nodes[0]
	m := msg(raftpb.MsgApp, 1, 2, 1, make([]byte, 1<<20))
	wait := func(cond func() bool) {
		for !cond() {
			select {
			case <-progress:
			case <-time.After(time.Millisecond):
			}
		}
	}
	a.Send(1, m) // dialed and handshaken before the clock starts
	wait(func() bool { return recv.Load() == 1 })
	recv.Store(0)
	cpu0 := selfcpu.Used()
	elapsed := sendWindowed(b, a, m, 16, &recv, wait)
	mb := float64(b.N) * (1 << 20) / 1e6
	b.ReportMetric(mb/elapsed.Seconds(), "MB/s")
	b.ReportMetric((selfcpu.Used()-cpu0).Seconds()*1e3/mb, "cpu-ms/MB")
}

// sendWindowed sends m from a to node 2 b.N times, at most window not yet
// received (recv counts the arrivals; wait blocks until its condition
// holds), and returns the time from the first send to the last arrival.
func sendWindowed(b *testing.B, a *tnode, m *raftpb.Message, window int64, recv *atomic.Int64, wait func(func() bool)) time.Duration {
	b.ResetTimer()
	start := time.Now()
	for i := range int64(b.N) {
		if i-recv.Load() >= window {
			wait(func() bool { return i-recv.Load() < window })
		}
		a.Send(uint64(i%64), m)
	}
	wait(func() bool { return recv.Load() == int64(b.N) })
	elapsed := time.Since(start)
	b.StopTimer()
	if d := a.Stats()[2].Dropped; d != 0 {
		b.Fatalf("%d messages dropped", d)
	}
	return elapsed
}
