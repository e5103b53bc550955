package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/pki"
)

// testPKI is a cluster CA with node certificates.
type testPKI struct {
	ca    *pki.CA
	pool  *x509.CertPool
	nodes map[uint64]tls.Certificate
}

func newTestPKI(t testing.TB, ids ...uint64) *testPKI {
	ca, err := pki.NewCA("test")
	require.NoError(t, err)
	p := &testPKI{ca: ca, pool: x509.NewCertPool(), nodes: map[uint64]tls.Certificate{}}
	p.pool.AddCert(ca.Cert)
	for _, id := range ids {
		p.nodes[id] = p.leaf(t, id)
	}
	return p
}

func (p *testPKI) leaf(t testing.TB, id uint64) tls.Certificate {
	l, err := p.ca.IssueNode(id, []string{"127.0.0.1"})
	require.NoError(t, err)
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	require.NoError(t, err)
	return c
}

// secure configures a transport of node id for mutual TLS.
func (p *testPKI) secure(id uint64) func(*Config) {
	return func(c *Config) {
		cert := p.nodes[id]
		c.TLSServer = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.pool}
		c.TLSClient = func(peer uint64) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: p.pool, ServerName: pki.NodeName(peer)}
		}
		c.PeerID = pki.NodeID
	}
}

func secureCluster(t testing.TB, p *testPKI, n int, opts ...func(*Config)) []*tnode {
	lns := make([]net.Listener, n)
	book := map[uint64]string{}
	for i := range lns {
		lns[i] = listen(t)
		book[uint64(i+1)] = lns[i].Addr().String()
	}
	nodes := make([]*tnode, n)
	for i := range nodes {
		id := uint64(i + 1)
		nodes[i] = startNode(t, id, lns[i], book, append([]func(*Config){p.secure(id)}, opts...)...)
	}
	return nodes
}

func TestMutualTLSStreams(t *testing.T) {
	p := newTestPKI(t, 1, 2, 3)
	nodes := secureCluster(t, p, 3)
	for i := range 50 {
		nodes[0].Send(1, msg(raftpb.MsgApp, 1, 2, uint64(i), []byte("x")))
		nodes[2].Send(1, msg(raftpb.MsgApp, 3, 2, uint64(i), nil))
	}
	require.Eventually(t, func() bool { return nodes[1].recv.count() == 100 }, 5*time.Second, 10*time.Millisecond)
	checkSeq(t, nodes[1].recv.from(1), 50, true)
	checkSeq(t, nodes[1].recv.from(3), 50, true)
}

// dialRaw opens a TLS connection to addr with cert (nil: none), speaking
// the raft stream protocol.
func dialRaw(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate, serverName string) (*tls.Conn, error) {
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, NextProtos: []string{alpnRaft}, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	return c, nil
}

// refused reports whether the server refused the stream: the TLS
// handshake failed, or the connection was closed (or a rejection came back)
// after our raft handshake.
func refused(t *testing.T, c *tls.Conn, from uint64) bool {
	hs := handshake{Version: protocolVersion, ClusterID: testCluster, From: from, To: 2, MaxFrame: 1 << 20}
	if _, err := c.Write(hs.marshal()); err != nil {
		return true
	}
	reply, err := readHandshake(c)
	return err != nil || reply.Flags&flagRejected != 0
}

// A stream is accepted only from a client certificate of the cluster CA,
// and only for the node the certificate names: a plaintext connection, no
// certificate, another CA's certificate, or a valid certificate claiming
// another node is refused, and the server goes on serving the real peers.
func TestForgedPeersAreRefused(t *testing.T) {
	checkGoroutines(t)
	p := newTestPKI(t, 1, 2, 3)
	nodes := secureCluster(t, p, 3)
	addr := nodes[1].addr

	// Plain TCP with the stream magic: the TLS handshake fails.
	raw, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	_, _ = raw.Write(handshake{Version: protocolVersion, ClusterID: testCluster, From: 1, To: 2, MaxFrame: 1 << 20}.marshal())
	_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = io.ReadAll(raw)
	raw.Close()
	_ = err // closed, whatever the error

	// TLS without a client certificate.
	if c, err := dialRaw(t, addr, p.pool, nil, pki.NodeName(2)); err == nil {
		require.True(t, refused(t, c, 1), "no client certificate")
		c.Close()
	}
	// A certificate of another cluster's CA.
	other := newTestPKI(t, 1)
	otherCert := other.nodes[1]
	if c, err := dialRaw(t, addr, p.pool, &otherCert, pki.NodeName(2)); err == nil {
		require.True(t, refused(t, c, 1), "another CA")
		c.Close()
	}
	// Node 3's certificate claiming to be node 1.
	cert3 := p.nodes[3]
	c, err := dialRaw(t, addr, p.pool, &cert3, pki.NodeName(2))
	require.NoError(t, err)
	require.True(t, refused(t, c, 1), "a certificate of node 3 claiming node 1")
	c.Close()
	require.Eventually(t, func() bool { return nodes[1].logs.contains("its certificate is node 3's") }, 3*time.Second, 10*time.Millisecond)

	// The real peers still get through.
	nodes[0].Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 1, nil))
	require.Eventually(t, func() bool { return len(nodes[1].recv.from(1)) > 0 }, 5*time.Second, 10*time.Millisecond)
}

// A dialer checks the certificate names the node it dials: a listener
// holding another node's certificate gets nothing.
func TestDialerChecksTheNode(t *testing.T) {
	p := newTestPKI(t, 1, 2, 3)
	ln := listen(t)
	// Node 3 listens at the address node 1 believes is node 2's.
	impostor := startNode(t, 3, ln, map[uint64]string{1: "127.0.0.1:1"}, p.secure(3))
	_ = impostor
	n1 := startNode(t, 1, nil, map[uint64]string{2: ln.Addr().String()}, p.secure(1))
	n1.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 1, nil))
	require.Eventually(t, func() bool { return n1.logs.contains("certificate is valid for node-3.vdl") }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, impostor.recv.count())
}

// A message whose From is not the stream's authenticated sender closes
// the stream.
func TestForgedFromClosesTheStream(t *testing.T) {
	p := newTestPKI(t, 1, 2, 3)
	nodes := secureCluster(t, p, 3)
	nodes[0].Send(1, msg(raftpb.MsgHeartbeat, 3, 2, 1, nil)) // node 1 sends a message saying it is node 3's
	require.Eventually(t, func() bool { return nodes[1].logs.contains("message claims sender node 3 on the stream of node 1") },
		5*time.Second, 10*time.Millisecond)
	require.Zero(t, len(nodes[1].recv.from(3)))
}

// The peers' HTTP shares the listener: ALPN http/1.1 under mutual TLS,
// the handler sees the client's certificate.
func TestPeerHTTPOnTheRaftListener(t *testing.T) {
	p := newTestPKI(t, 1, 2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := pki.NodeID(r.TLS.PeerCertificates[0])
		fmt.Fprintf(w, "hello node %d", id)
	})
	nodes := secureCluster(t, p, 2, func(c *Config) { c.HTTP = handler })
	cl := &http.Client{Transport: &http.Transport{DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
		return nodes[0].DialHTTP(2)
	}}}
	resp, err := cl.Get("https://node-2/entries")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "hello node 1", string(body))
	// Streams still work beside it.
	nodes[0].Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 1, nil))
	require.Eventually(t, func() bool { return len(nodes[1].recv.from(1)) > 0 }, 5*time.Second, 10*time.Millisecond)
}

// Without TLS (insecure_peers) the listener tells HTTP from streams by the
// stream magic.
func TestPlainPeerHTTPOnTheRaftListener(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("plain")) })
	nodes := cluster(t, 2, func(c *Config) { c.HTTP = handler })
	resp, err := http.Get("http://" + nodes[1].addr + "/x")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "plain", string(body))
	nodes[0].Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 1, nil))
	require.Eventually(t, func() bool { return len(nodes[1].recv.from(1)) > 0 }, 5*time.Second, 10*time.Millisecond)
}
