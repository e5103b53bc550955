package proccluster

// The cluster's credentials, as production has them (docs/security.md):
// the CA and certificates, the admin token and its HTTPS client, the SASL
// user of the Kafka TLS listeners.

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/internal/users"
)

// writeUsers makes the SASL users file with Cluster.User.
func (c *Cluster) writeUsers() error {
	f := &users.File{}
	if err := f.Set(c.User, c.Password, users.DefaultIterations); err != nil {
		return err
	}
	return f.Save(filepath.Join(c.Certs, "users.toml"))
}

// KafkaTLSAddrs are the Kafka TLS listeners.
func (c *Cluster) KafkaTLSAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.KafkaTLS)
	}
	return out
}

// ClientTLS is a Kafka client's TLS: it trusts the cluster CA.
func (c *Cluster) ClientTLS() *tls.Config {
	pool, err := pki.Pool(filepath.Join(c.Certs, "ca.crt"))
	if err != nil {
		c.tb.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func (c *Cluster) adminHTTP() (*http.Client, error) {
	pool, err := pki.Pool(filepath.Join(c.Certs, "ca.crt"))
	if err != nil {
		return nil, err
	}
	tok, err := os.ReadFile(filepath.Join(c.Certs, "admin.token"))
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &http.Client{Timeout: 5 * time.Second, Transport: pki.Bearer{Token: strings.TrimSpace(string(tok)), Next: tr}}, nil
}

// VdlctlEnv is the environment that gives vdlctl the cluster's CA and
// admin token.
func (c *Cluster) VdlctlEnv() []string {
	return []string{"VDL_CA=" + filepath.Join(c.Certs, "ca.crt"), "VDL_ADMIN_TOKEN_FILE=" + filepath.Join(c.Certs, "admin.token")}
}
