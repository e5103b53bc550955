package integration

import (
	"crypto/tls"
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/raftnode/transport"
)

// TestForgedPeerIsRefused: the raft port as a hostile client on the same
// network meets it. One forged MsgHeartbeat (term 1000, commit 2^40)
// claiming to come from node 1 once killed node 2 ("tocommit out of
// range"). Now it is sent three ways — plain text, TLS with a certificate
// of another CA naming node 1, and TLS with no certificate — and every
// stream is refused: node 2 stays up, its term untouched, and the stream
// serves.
func TestForgedPeerIsRefused(t *testing.T) {
	c := StartCluster(t, Options{})
	const stream = "s1"
	c.WaitLeader(stream, 20*time.Second)
	target := c.Node(2)
	before, err := c.StreamStatus(2, stream)
	require.NoError(t, err)

	h := fnv.New64a()
	_, _ = h.Write([]byte("vdl-test")) // the cluster id, as the server hashes it
	forged := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
		Term: proto.Uint64(1000), Commit: proto.Uint64(1 << 40)}

	otherCA := filepath.Join(t.TempDir(), "other")
	require.NoError(t, pki.EnsureDir(otherCA, "attacker", []uint64{1}, nil, []string{"127.0.0.1"}, nil))
	otherCert, err := tls.LoadX509KeyPair(filepath.Join(otherCA, "node1.crt"), filepath.Join(otherCA, "node1.key"))
	require.NoError(t, err)
	realCA, err := pki.Pool(filepath.Join(c.Certs, "ca.crt"))
	require.NoError(t, err)

	attackers := map[string]transport.Config{
		"plain text": {},
		"another CA's certificate naming node 1": {
			TLSServer: &tls.Config{Certificates: []tls.Certificate{otherCert}},
			TLSClient: func(uint64) *tls.Config {
				// Trusts the real CA so that the handshake gets as far
				// as the server's check of the client certificate.
				return &tls.Config{Certificates: []tls.Certificate{otherCert}, RootCAs: realCA, ServerName: pki.NodeName(2)}
			},
			PeerID: pki.NodeID,
		},
		"TLS without a certificate": {
			TLSServer: &tls.Config{Certificates: []tls.Certificate{otherCert}},
			TLSClient: func(uint64) *tls.Config {
				return &tls.Config{RootCAs: realCA, ServerName: pki.NodeName(2)}
			},
			PeerID: pki.NodeID,
		},
	}
	for name, cfg := range attackers {
		cfg.NodeID, cfg.ClusterID = 1, h.Sum64()
		cfg.Peers = map[uint64]string{2: target.Raft}
		cfg.Handler = func(uint64, *raftpb.Message) {}
		tr := transport.New(cfg)
		require.NoError(t, tr.Start(), name)
		for range 5 {
			tr.Send(1, forged)
			time.Sleep(100 * time.Millisecond)
		}
		tr.Close()
	}

	time.Sleep(time.Second)
	require.True(t, target.Running(), "node 2 is up")
	after, err := c.StreamStatus(2, stream)
	require.NoError(t, err)
	require.Less(t, after.Term, uint64(1000), "the forged term never reached raft")
	require.Less(t, after.Commit, uint64(1)<<40)
	t.Logf("node 2: term %d → %d, commit %d → %d", before.Term, after.Term, before.Commit, after.Commit)

	// The stream serves.
	produceValues(t, c, []string{"after the forgery"})
	logs, err := os.ReadFile(target.LogPath)
	require.NoError(t, err)
	require.Contains(t, string(logs), "rejecting connection", "node 2 logs the refusals")
}
