package transport

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
)

// TLS records in batches. crypto/tls writes each record it seals (at most
// 16 KiB of data) with a write system call of its own and reads one or two
// records per read: 64 or more system calls per 1 MiB append, on both
// ends, for every follower. On loopback each write also runs the
// receiver's TCP processing. Beneath the TLS of an authenticated stream a
// batchWriter gathers the sealed records into writes of up to
// tlsBatchBytes, flushed whenever the stream flushes, and a batchReader
// reads up to as much at once: 5 writes and 8 reads per MiB instead of 65
// and 55, and BenchmarkTLSAppends' CPU per MB (both ends) 1.39 -> 1.24 ms
// (medians of six alternated runs; docs/performance.md).
const tlsBatchBytes = 256 << 10

// batchWriter is a dialed connection under its TLS. It writes through
// until gather (the handshakes are done); from then on what TLS writes is
// held until flush, or until tlsBatchBytes are held. Its lock is the one
// writer TLS allows at a time and the stream's flush.
type batchWriter struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte // held, allocated at the first write held
}

func (w *batchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.hold {
		return w.Conn.Write(p)
	}
	if len(w.buf)+len(p) > tlsBatchBytes {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, tlsBatchBytes)
	}
	w.buf = append(w.buf, p...) // TLS reuses p once Write returns
	return len(p), nil
}

// gather holds what is written from now on until flush.
func (w *batchWriter) gather() {
	w.mu.Lock()
	w.hold = true
	w.mu.Unlock()
}

// flush writes what is held.
func (w *batchWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *batchWriter) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.Conn.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// batchReader is an accepted connection under its TLS. It reads through
// until batch (the peer is authenticated), and from then on up to
// tlsBatchBytes at a time: an unauthenticated connection costs no buffer.
type batchReader struct {
	net.Conn
	r *bufio.Reader
}

func (r *batchReader) Read(p []byte) (int, error) {
	if r.r == nil {
		return r.Conn.Read(p)
	}
	return r.r.Read(p)
}

// batch reads through a buffer from now on. Only the goroutine reading
// may call it; nothing read before is lost, as nothing was buffered here.
func (r *batchReader) batch() {
	if r.r == nil {
		r.r = bufio.NewReaderSize(r.Conn, tlsBatchBytes)
	}
}

// under is what lies beneath c's TLS (nil if c is not TLS).
func under(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return nil
}
