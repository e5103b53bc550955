package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func loadLeaf(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	require.NoError(t, err)
	c, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	return c
}

// EnsureDir makes a CA and certificates that verify against it, naming
// what peers and clients check; a second call keeps what exists and adds
// what is new, signed by the same CA.
func TestEnsureDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, EnsureDir(dir, "prod", []uint64{1, 2}, []uint64{1}, []string{"127.0.0.1", "vdl.example.com"}, []string{"alice"}))
	pool, err := Pool(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	key, err := os.Stat(filepath.Join(dir, "ca.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), key.Mode().Perm(), "private keys are the owner's only")

	n1 := loadLeaf(t, dir, "node1")
	_, err = n1.Verify(x509.VerifyOptions{Roots: pool, DNSName: "vdl.example.com"})
	require.NoError(t, err, "clients reach the server by its host names")
	_, err = n1.Verify(x509.VerifyOptions{Roots: pool, DNSName: NodeName(1), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "peers check the node name, both ways")
	require.True(t, n1.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))
	id, ok := NodeID(n1)
	require.True(t, ok)
	require.Equal(t, uint64(1), id)
	_, ok = Operator(n1)
	require.False(t, ok, "a node certificate is not an operator's")

	op := loadLeaf(t, dir, "operator-alice")
	name, ok := Operator(op)
	require.True(t, ok)
	require.Equal(t, "alice", name)
	_, ok = NodeID(op)
	require.False(t, ok)

	before, err := os.ReadFile(filepath.Join(dir, "node1.crt"))
	require.NoError(t, err)
	require.NoError(t, EnsureDir(dir, "prod", []uint64{1, 3}, nil, []string{"127.0.0.1"}, nil))
	after, err := os.ReadFile(filepath.Join(dir, "node1.crt"))
	require.NoError(t, err)
	require.Equal(t, before, after, "existing certificates are kept")
	n3 := loadLeaf(t, dir, "node3")
	_, err = n3.Verify(x509.VerifyOptions{Roots: pool, DNSName: NodeName(3)})
	require.NoError(t, err, "a node added later is signed by the same CA")

	other := t.TempDir()
	require.NoError(t, EnsureDir(other, "other", []uint64{1}, nil, nil, nil))
	_, err = loadLeaf(t, other, "node1").Verify(x509.VerifyOptions{Roots: pool, DNSName: NodeName(1)})
	require.Error(t, err, "another cluster's CA is not trusted")
}

func TestEnsureToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "admin.token")
	tok, err := EnsureToken(file)
	require.NoError(t, err)
	require.Len(t, tok, 64)
	again, err := EnsureToken(file)
	require.NoError(t, err)
	require.Equal(t, tok, again, "an existing token is kept")
	fi, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
