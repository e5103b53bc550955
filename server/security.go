package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vdl-project/vdl/internal/pki"
)

// TLSConfig is the server's certificate: peers authenticate each other
// with it (mutual TLS on the raft listener, which also carries the peers'
// HTTP), and it secures the admin listener and the Kafka TLS listener.
// See docs/security.md; `vdl certs` makes a CA and the certificates.
type TLSConfig struct {
	CAFile   string `toml:"ca_file"`   // the cluster CA (PEM)
	CertFile string `toml:"cert_file"` // this node's certificate: names node-<id>.vdl
	KeyFile  string `toml:"key_file"`
	// InsecurePeers runs the raft listener (and the peers' HTTP) in plain
	// text, unauthenticated: whoever reaches it can forge raft messages.
	// For a trusted network only; the server warns at start.
	InsecurePeers bool `toml:"insecure_peers"`
}

// AdminConfig protects the admin API's mutating endpoints (retention,
// leadership, membership, failpoints): a request needs the bearer token
// (Authorization: Bearer ...) or an operator client certificate of the
// cluster CA. Read-only endpoints (health, status, groups, metrics) need
// neither.
type AdminConfig struct {
	Token     string `toml:"token"`      // the token itself (prefer token_file)
	TokenFile string `toml:"token_file"` // a file holding the token
}

func (c *Config) validateSecurity() []error {
	var errs []error
	t := c.TLS
	set := t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
	switch {
	case set && (t.CAFile == "" || t.CertFile == "" || t.KeyFile == ""):
		errs = append(errs, errors.New("tls: ca_file, cert_file and key_file go together"))
	case !set && !t.InsecurePeers:
		errs = append(errs, errors.New("tls: peers need mutual TLS: set ca_file, cert_file and key_file (vdl certs makes them), "+
			"or insecure_peers = true on a trusted network"))
	}
	if c.KafkaTLSListen != "" && !set {
		errs = append(errs, errors.New("kafka_tls_listen needs this node's certificate: set [tls] ca_file, cert_file and key_file"))
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		errs = append(errs, errors.New("admin: token and token_file: set one"))
	}
	return errs
}

// security is what the server authenticates with, loaded at start.
type security struct {
	pool  *x509.CertPool  // the cluster CA; nil without TLS
	cert  tls.Certificate // this node's
	token string          // the admin bearer token ("" : none)
}

func loadSecurity(c *Config) (*security, error) {
	s := &security{}
	if c.Admin.TokenFile != "" {
		b, err := os.ReadFile(c.Admin.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		s.token = strings.TrimSpace(string(b))
		if s.token == "" {
			return nil, fmt.Errorf("admin token: %s is empty", c.Admin.TokenFile)
		}
	} else {
		s.token = c.Admin.Token
	}
	if c.TLS.CertFile == "" {
		return s, nil
	}
	pool, err := pki.Pool(c.TLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls: %s: %w", c.TLS.CertFile, err)
	}
	if id, ok := pki.NodeID(leaf); !ok || id != c.NodeID {
		return nil, fmt.Errorf("tls: %s is not node %d's certificate (it names %v)", c.TLS.CertFile, c.NodeID, leaf.DNSNames)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("tls: %s is not signed by %s: %w", c.TLS.CertFile, c.TLS.CAFile, err)
	}
	s.pool, s.cert = pool, cert
	return s, nil
}

// secure reports whether the server has a certificate.
func (s *security) secure() bool { return s.pool != nil }

// peerServer is the raft listener's TLS (the transport requires and checks
// the client certificate).
func (s *security) peerServer() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool, MinVersion: tls.VersionTLS13}
}

// peerClient is the TLS of a connection to peer: its certificate must be
// that node's.
func (s *security) peerClient(peer uint64) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, RootCAs: s.pool, ServerName: pki.NodeName(peer),
		MinVersion: tls.VersionTLS13}
}

// listenerTLS is the admin and Kafka listeners' TLS: this node's
// certificate; a client certificate of the cluster CA is checked if given.
func (s *security) listenerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool, ClientAuth: tls.VerifyClientCertIfGiven,
		MinVersion: tls.VersionTLS12}
}
