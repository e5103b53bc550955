package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/vdl-project/vdl/internal/tlsbatch"
)

// Mutual TLS and the peers' HTTP. With Config.TLSServer set, every
// connection to the listener is TLS with a verified client certificate,
// and the node id the certificate names is the only sender the stream may
// claim. The same listener serves the peers' HTTP requests (Config.HTTP:
// snapshot entry copies) when the client negotiates ALPN "http/1.1";
// without TLS (Config.Insecure), a connection that does not open with the
// stream magic is HTTP.

// ALPN protocol names.
const (
	alpnRaft = "vdl-raft/2"
	alpnHTTP = "http/1.1"
)

// serverTLS is the acceptor's TLS configuration: the caller's, requiring
// a client certificate and offering both protocols.
func (t *Transport) serverTLS() *tls.Config {
	c := t.cfg.TLSServer.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.NextProtos = []string{alpnRaft, alpnHTTP}
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

// secureAccept runs the TLS handshake of an accepted connection. It
// returns the connection to use, the node id its certificate names, and
// whether it is HTTP (then handed to the HTTP server, which owns it).
func (t *Transport) secureAccept(c net.Conn) (net.Conn, uint64, bool, error) {
	if t.cfg.TLSServer == nil {
		if t.cfg.HTTP == nil {
			return c, 0, false, nil
		}
		_ = c.SetReadDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
		pc := &peekedConn{Conn: c, r: bufio.NewReader(c)}
		magic, err := pc.r.Peek(len(handshakeMagic))
		if err != nil {
			return nil, 0, false, fmt.Errorf("reading the first bytes: %w", err)
		}
		_ = c.SetReadDeadline(time.Time{})
		return pc, 0, string(magic) != handshakeMagic, nil
	}
	tc := tls.Server(tlsbatch.NewReader(c), t.serverTLS())
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, 0, false, fmt.Errorf("TLS handshake: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return nil, 0, false, errors.New("no client certificate")
	}
	id, ok := t.cfg.PeerID(st.PeerCertificates[0])
	if !ok {
		return nil, 0, false, fmt.Errorf("the client certificate (%s) names no node", st.PeerCertificates[0].Subject)
	}
	return tc, id, st.NegotiatedProtocol == alpnHTTP, nil
}

// secureDial wraps a dialed connection to peer in TLS.
func (t *Transport) secureDial(c net.Conn, peer uint64, alpn string) (net.Conn, error) {
	if t.cfg.TLSClient == nil {
		return c, nil
	}
	cfg := t.cfg.TLSClient(peer).Clone()
	cfg.NextProtos = []string{alpn}
	if cfg.MinVersion < tls.VersionTLS13 {
		cfg.MinVersion = tls.VersionTLS13
	}
	tc := tls.Client(tlsbatch.NewWriter(c), cfg)
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake with node %d: %w", peer, err)
	}
	_ = c.SetDeadline(time.Time{})
	if got := tc.ConnectionState().NegotiatedProtocol; got != alpn {
		return nil, fmt.Errorf("node %d does not speak %s (ALPN %q)", peer, alpn, got)
	}
	return tc, nil
}

// DialHTTP connects to peer's listener for an HTTP request (Config.HTTP on
// the other end), over mutual TLS when configured. An http.Transport's
// DialContext can use it (with addresses mapped back to peers).
func (t *Transport) DialHTTP(peer uint64) (net.Conn, error) {
	p := (*t.peers.Load())[peer]
	if p == nil {
		return nil, fmt.Errorf("transport: unknown node %d", peer)
	}
	c, err := t.cfg.Dialer.DialContext(t.ctx, "tcp", p.address())
	if err != nil {
		return nil, err
	}
	tc, err := t.secureDial(c, peer, alpnHTTP)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// peekedConn is a connection whose first bytes were peeked.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connListener hands accepted connections to an http.Server.
type connListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// hand gives c to the HTTP server; false if it is closed.
func (l *connListener) hand(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// startHTTP serves Config.HTTP on connections the listener hands over.
func (t *Transport) startHTTP(addr net.Addr) {
	t.httpLn = newConnListener(addr)
	t.httpSrv = &http.Server{Handler: t.cfg.HTTP, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: nil}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = t.httpSrv.Serve(t.httpLn)
	}()
}
