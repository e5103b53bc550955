// Package pki makes and reads VDL's certificates with crypto/x509, so that
// nobody needs openssl: a cluster CA, node certificates (each naming its
// node id, for the peers' mutual TLS, and the server's addresses, for
// admin and Kafka clients) and operator certificates (for the admin API).
//
// Names: a node certificate carries the DNS name "node-<id>.vdl"; a peer
// dialing node 3 expects that name (standard verification against the
// cluster CA), and a server accepting a peer reads the node id from it. An
// operator certificate carries "operator-<name>.vdl" and is only good as a
// client certificate.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// NodeName is the DNS name a node's certificate carries.
func NodeName(id uint64) string { return fmt.Sprintf("node-%d.vdl", id) }

// ConfigServerName is the DNS name a config server's certificate carries:
// config servers have their own ids, and a data server's certificate must
// not let it pose as one.
func ConfigServerName(id uint64) string { return fmt.Sprintf("config-%d.vdl", id) }

// ConfigServerID returns the config server id a verified certificate names.
func ConfigServerID(cert *x509.Certificate) (uint64, bool) { return idNamed(cert, "config-") }

// OperatorName is the DNS name an operator's certificate carries.
func OperatorName(name string) string { return "operator-" + name + ".vdl" }

// NodeID returns the node id a verified certificate names.
func NodeID(cert *x509.Certificate) (uint64, bool) { return idNamed(cert, "node-") }

func idNamed(cert *x509.Certificate, prefix string) (uint64, bool) {
	for _, n := range cert.DNSNames {
		if s, ok := strings.CutPrefix(n, prefix); ok {
			if s, ok := strings.CutSuffix(s, ".vdl"); ok {
				if id, err := strconv.ParseUint(s, 10, 64); err == nil && id != 0 {
					return id, true
				}
			}
		}
	}
	return 0, false
}

// Operator returns the operator name a verified certificate names.
func Operator(cert *x509.Certificate) (string, bool) {
	for _, n := range cert.DNSNames {
		if s, ok := strings.CutPrefix(n, "operator-"); ok {
			if s, ok := strings.CutSuffix(s, ".vdl"); ok && s != "" {
				return s, true
			}
		}
	}
	return "", false
}

// CA is a cluster's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate
}

// validity of what this package issues.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

// NewCA makes a CA for cluster.
func NewCA(cluster string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "VDL cluster CA " + cluster, Organization: []string{"VDL " + cluster}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// IssueNode issues node id's certificate, also naming hosts (DNS names or
// IP addresses clients reach it by).
func (ca *CA) IssueNode(id uint64, hosts []string) (Leaf, error) {
	if id == 0 {
		return Leaf{}, errors.New("pki: node id 0")
	}
	return ca.issue(fmt.Sprintf("VDL node %d", id), append([]string{NodeName(id)}, hosts...),
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
}

// IssueConfigServer issues config server id's certificate, also naming hosts.
func (ca *CA) IssueConfigServer(id uint64, hosts []string) (Leaf, error) {
	if id == 0 {
		return Leaf{}, errors.New("pki: config server id 0")
	}
	return ca.issue(fmt.Sprintf("VDL config server %d", id), append([]string{ConfigServerName(id)}, hosts...),
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
}

// IssueOperator issues an operator's client certificate.
func (ca *CA) IssueOperator(name string) (Leaf, error) {
	if name == "" || strings.ContainsAny(name, ". /") {
		return Leaf{}, fmt.Errorf("pki: bad operator name %q", name)
	}
	return ca.issue("VDL operator "+name, []string{OperatorName(name)}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

func (ca *CA) issue(cn string, names []string, usage []x509.ExtKeyUsage) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: ca.Cert.Subject.Organization},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Leaf{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// Save writes the CA's certificate and key into dir (ca.crt, ca.key).
func (ca *CA) Save(dir string) error {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	return errors.Join(
		writeFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o644),
		writeFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}

// LoadCA reads a CA saved by Save.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("pki: %s holds no ECDSA certificate authority", dir)
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// Save writes a leaf as dir/name.crt and dir/name.key.
func (l Leaf) Save(dir, name string) error {
	return errors.Join(
		writeFile(filepath.Join(dir, name+".crt"), l.CertPEM, 0o644),
		writeFile(filepath.Join(dir, name+".key"), l.KeyPEM, 0o600))
}

func writeFile(name string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, data, mode)
}

// Pool reads a PEM file of CA certificates.
func Pool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", caFile)
	}
	return p, nil
}

// EnsureDir makes dir hold a cluster's certificates, creating what is
// missing (and keeping what is there, so it can be run again to add a
// node): ca.crt and ca.key, node<id>.crt/.key for each node and
// config<id>.crt/.key for each config server (naming hosts too),
// operator-<name>.crt/.key for each operator.
func EnsureDir(dir, cluster string, nodes, configServers []uint64, hosts, operators []string) error {
	ca, err := LoadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = NewCA(cluster); err == nil {
			err = ca.Save(dir)
		}
	}
	if err != nil {
		return err
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name+".crt"))
		return err == nil
	}
	for _, id := range nodes {
		name := fmt.Sprintf("node%d", id)
		if exists(name) {
			continue
		}
		l, err := ca.IssueNode(id, hosts)
		if err == nil {
			err = l.Save(dir, name)
		}
		if err != nil {
			return err
		}
	}
	for _, id := range configServers {
		name := fmt.Sprintf("config%d", id)
		if exists(name) {
			continue
		}
		l, err := ca.IssueConfigServer(id, hosts)
		if err == nil {
			err = l.Save(dir, name)
		}
		if err != nil {
			return err
		}
	}
	for _, op := range operators {
		name := "operator-" + op
		if exists(name) {
			continue
		}
		l, err := ca.IssueOperator(op)
		if err == nil {
			err = l.Save(dir, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// EnsureToken makes file hold a random admin token (64 hex digits) unless
// it holds one already, and returns it.
func EnsureToken(file string) (string, error) {
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := fmt.Sprintf("%x", b)
	return tok, writeFile(file, []byte(tok+"\n"), 0o600)
}

// Bearer is an HTTP transport that sends the admin token with every
// request, redirects included (a server redirects a change on a stream to
// the stream's leader).
type Bearer struct {
	Token string
	Next  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Next.RoundTrip(r)
}
