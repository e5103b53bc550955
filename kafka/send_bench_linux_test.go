//go:build linux

package kafka_test

import (
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vdl-project/vdl/internal/selfcpu"
	"github.com/vdl-project/vdl/vfs"
)

// BenchmarkSendChunks: the ways the bytes of a closed segment can reach a
// consumer's socket, 1 MiB at a time (a default per-partition fetch). What
// VDL does: read the chunk with O_DIRECT into pooled aligned memory and
// write it (writev, with the response's framing in front); beside it, a
// read through the page cache and write, and sendfile(2) from the file,
// each cold (the file's pages dropped before every pass over it, as a
// catch-up finds a closed segment) and warm. The receiver is a loopback
// TCP connection of this process reading into one 1 MiB buffer, the same
// for all. Metrics: MB/s and the CPU of both ends per GiB sent.
//
//	go test -run '^$' -bench '^BenchmarkSendChunks$' -benchtime 4x ./kafka/
func BenchmarkSendChunks(b *testing.B) {
	const size, chunk = 128 << 20, 1 << 20
	name := filepath.Join(b.TempDir(), "segment")
	data := make([]byte, size)
	_, _ = rand.Read(data)
	require.NoError(b, os.WriteFile(name, data, 0o644))
	f, err := vfs.OS{}.Open(name)
	require.NoError(b, err)
	defer f.Close()
	require.NoError(b, f.Sync())
	raw, err := os.Open(name) // sendfile's source descriptor
	require.NoError(b, err)
	defer raw.Close()

	buf := make([]byte, chunk+vfs.DirectAlign)
	aligned, ok := vfs.AlignedBuf(buf, chunk)
	require.True(b, ok)
	directWrite := func(c *net.TCPConn, off int64) error {
		if _, err := f.ReadDirect(aligned, off); err != nil {
			return err
		}
		_, err := c.Write(aligned)
		return err
	}
	preadWrite := func(c *net.TCPConn, off int64) error {
		if _, err := f.ReadAt(buf[:chunk], off); err != nil {
			return err
		}
		_, err := c.Write(buf[:chunk])
		return err
	}
	sendFile := func(c *net.TCPConn, off int64) error { return sendfile(c, int(raw.Fd()), off, chunk) }

	for _, tc := range []struct {
		name string
		cold bool
		send func(*net.TCPConn, int64) error
	}{
		{"direct-write", true, directWrite},
		{"pread-write/cold", true, preadWrite},
		{"pread-write/warm", false, preadWrite},
		{"sendfile/cold", true, sendFile},
		{"sendfile/warm", false, sendFile},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sender, received := loopbackPair(b)
			b.SetBytes(size)
			var cpu time.Duration
			passes := 0
			for b.Loop() {
				b.StopTimer()
				if tc.cold {
					require.NoError(b, f.DropCache(0, size))
				} else {
					_, err := f.ReadAt(data, 0) // the pages in the cache
					require.NoError(b, err)
				}
				cpu0 := selfcpu.Used()
				b.StartTimer()
				for off := int64(0); off < size; off += chunk {
					require.NoError(b, tc.send(sender, off))
				}
				cpu += selfcpu.Used() - cpu0
				passes++
			}
			b.StopTimer()
			require.NoError(b, sender.Close())
			require.Equal(b, int64(passes)*size, <-received, "bytes received")
			b.ReportMetric(cpu.Seconds()/float64(passes)/(float64(size)/(1<<30)), "core-s/GiB")
		})
	}
}

// loopbackPair connects two TCP sockets over loopback: the sending end,
// and a channel that gets the bytes the other end read once the sender
// closes.
func loopbackPair(b *testing.B) (*net.TCPConn, <-chan int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		buf, n := make([]byte, 1<<20), int64(0)
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				received <- n
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	return c.(*net.TCPConn), received
}

// sendfile sends n bytes of the file src from off to c with sendfile(2).
func sendfile(c *net.TCPConn, src int, off int64, n int) error {
	sc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	err = sc.Write(func(fd uintptr) bool {
		for n > 0 {
			k, err := unix.Sendfile(int(fd), src, &off, n)
			n -= max(k, 0)
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false // wait until the socket takes more
			case err != nil:
				opErr = err
				return true
			case k == 0:
				opErr = io.ErrUnexpectedEOF
				return true
			}
		}
		return true
	})
	return errors.Join(err, opErr)
}
