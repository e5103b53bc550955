// Package tlsbatch gathers a TLS connection's records into batches
// beneath the TLS layer. crypto/tls seals at most 16 KiB per record and
// writes each record with a system call of its own, and reads one or two
// records per read: a 1 MiB Raft append is 64 writes on one end and
// about as many reads on the other (on loopback each write also runs the
// receiver's TCP processing). A Writer beneath TLS holds
// what TLS writes, once told to Gather, until Flush; a Reader, once told
// to Batch, reads up to Bytes at a time.
//
// Neither buffers anything before it is told to (after the handshakes and
// the peer's authentication): a connection that never gets that far costs
// no buffer. A Writer's buffer is pooled and held only between the first
// write held and the flush, so an idle connection holds none.
package tlsbatch

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
)

// Bytes is how much a batch holds at most.
const Bytes = 256 << 10

var pool = sync.Pool{New: func() any { b := make([]byte, 0, Bytes); return &b }}

// Writer is a connection beneath its TLS. It writes through until Gather;
// from then on what TLS writes is held until Flush, or until Bytes are
// held.
//
// A flush writes outside the lock: what TLS writes meanwhile (the
// close_notify alert of a Close from another goroutine, a key update's
// answer from the reader) goes into the next batch, in order, so a Close
// never waits for a flush stuck on a peer that stopped reading: it closes
// the connection, which ends the flush.
type Writer struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  *[]byte // held bytes (pooled); nil when none
}

// NewWriter wraps c, writing through until Gather.
func NewWriter(c net.Conn) *Writer { return &Writer{Conn: c} }

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if !w.hold {
		w.mu.Unlock()
		return w.Conn.Write(p)
	}
	if w.buf != nil && len(*w.buf)+len(p) > Bytes {
		// A full batch: only the stream's goroutine writes this much, and
		// it is the one that flushes.
		w.mu.Unlock()
		if err := w.Flush(); err != nil {
			return 0, err
		}
		w.mu.Lock()
	}
	if w.buf == nil {
		w.buf = pool.Get().(*[]byte)
	}
	*w.buf = append(*w.buf, p...) // TLS reuses p once Write returns
	w.mu.Unlock()
	return len(p), nil
}

// Gather holds what is written from now on until Flush.
func (w *Writer) Gather() {
	w.mu.Lock()
	w.hold = true
	w.mu.Unlock()
}

// Flush writes what is held. One goroutine flushes at a time: the one
// writing through TLS.
func (w *Writer) Flush() error {
	w.mu.Lock()
	b := w.buf
	w.buf = nil
	w.mu.Unlock()
	if b == nil {
		return nil
	}
	_, err := w.Conn.Write(*b)
	*b = (*b)[:0]
	pool.Put(b)
	return err
}

// Reader is a connection beneath its TLS. It reads through until Batch,
// and from then on up to Bytes at a time.
type Reader struct {
	net.Conn
	r *bufio.Reader
}

// NewReader wraps c, reading through until Batch.
func NewReader(c net.Conn) *Reader { return &Reader{Conn: c} }

func (r *Reader) Read(p []byte) (int, error) {
	if r.r == nil {
		return r.Conn.Read(p)
	}
	return r.r.Read(p)
}

// Batch reads through a buffer from now on. Only the goroutine reading
// may call it; nothing read before is lost, as nothing was buffered here.
func (r *Reader) Batch() {
	if r.r == nil {
		r.r = bufio.NewReaderSize(r.Conn, Bytes)
	}
}

// Under is what lies beneath c's TLS (nil if c is not a TLS connection).
func Under(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return nil
}

// WriterOf is the Writer beneath c's TLS, or nil.
func WriterOf(c net.Conn) *Writer {
	w, _ := Under(c).(*Writer)
	return w
}
