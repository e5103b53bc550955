package tlsbatch

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/pki"
)

// recorder is a connection that records its writes.
type recorder struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func (r *recorder) sizes() (out []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.writes {
		out = append(out, len(w))
	}
	return out
}

func (r *recorder) all() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.writes, nil)
}

// A Writer writes through until Gather, then holds what it is given until
// Flush or until a batch is full, in order, and holds no buffer between
// batches.
func TestWriterGathersUntilFlush(t *testing.T) {
	rec := &recorder{}
	w := NewWriter(rec)
	var sent []byte
	write := func(n int) {
		p := bytes.Repeat([]byte{byte(len(sent))}, n)
		sent = append(sent, p...)
		k, err := w.Write(p)
		require.NoError(t, err)
		require.Equal(t, n, k)
	}
	write(100)
	write(200)
	require.Equal(t, []int{100, 200}, rec.sizes(), "through before Gather (the handshakes)")

	w.Gather()
	for range 20 {
		write(16 << 10)
	}
	require.Equal(t, []int{100, 200, Bytes}, rec.sizes(), "a full batch is written at once, the rest held")
	require.NoError(t, w.Flush())
	require.Equal(t, []int{100, 200, Bytes, 4 * 16 << 10}, rec.sizes())
	require.Nil(t, w.buf, "no buffer held between batches")
	require.NoError(t, w.Flush(), "nothing held: nothing written")
	require.Len(t, rec.sizes(), 4)
	require.Equal(t, sent, rec.all(), "the bytes, in order")
}

// Closing a TLS connection whose Writer is stuck flushing to a peer that
// stopped reading returns at once and ends the flush: the close_notify
// alert goes into the next batch instead of waiting for the stuck one
// (crypto/tls would wait 5 s for it).
func TestCloseDoesNotWaitForAStuckFlush(t *testing.T) {
	client, server := tlsConfigs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, server)
		_ = tc.Handshake()
		accepted <- tc // and never read again
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	w := NewWriter(raw)
	tc := tls.Client(w, client)
	require.NoError(t, tc.Handshake())
	peer := <-accepted
	defer peer.Close()

	w.Gather()
	flushed := make(chan error, 1)
	var flushes atomic.Int64
	go func() {
		p := make([]byte, 64<<10)
		for {
			if _, err := tc.Write(p); err != nil {
				flushed <- err
				return
			}
			if err := w.Flush(); err != nil {
				flushed <- err
				return
			}
			flushes.Add(1)
		}
	}()
	// Stuck once the sockets' buffers are full: no flush ends for a while.
	for n := int64(-1); n != flushes.Load(); {
		n = flushes.Load()
		time.Sleep(300 * time.Millisecond)
	}

	start := time.Now()
	_ = tc.Close()
	require.Less(t, time.Since(start), time.Second, "Close of a connection stuck flushing")
	select {
	case err := <-flushed:
		require.Error(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("the stuck flush did not end with the connection")
	}
}

// A Reader reads through until Batch, then up to Bytes per read.
func TestReaderBatchesOnceTold(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = b.Write(bytes.Repeat([]byte{7}, 3*Bytes)) }()
	r := NewReader(a)
	p := make([]byte, 10)
	n, err := r.Read(p)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Nil(t, r.r, "no buffer before Batch")
	r.Batch()
	got, err := io.ReadAll(io.LimitReader(r, 3*Bytes-10))
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 3*Bytes-10), got)
}

// tlsConfigs are a client's and a server's TLS configurations of a test CA.
func tlsConfigs(t *testing.T) (client, server *tls.Config) {
	ca, err := pki.NewCA("test")
	require.NoError(t, err)
	leaf, err := ca.IssueNode(1, []string{"127.0.0.1"})
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: pki.NodeName(1), MinVersion: tls.VersionTLS13},
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
}
