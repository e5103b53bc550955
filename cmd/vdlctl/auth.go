package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/internal/pki"
)

// Talking to a secured server (docs/security.md): the admin HTTP is HTTPS
// with the cluster CA's certificates (--ca), and changes need the admin
// token (--token, --token-file) or an operator certificate (--cert,
// --key). Each flag has an environment variable, so a shell can set them
// once (vdl dev prints them).
type credentials struct {
	ca, token, tokenFile, cert, key string
}

func (c *credentials) flags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.ca, "ca", os.Getenv("VDL_CA"), "cluster CA certificate (PEM): the admin HTTP is HTTPS [$VDL_CA]")
	f.StringVar(&c.token, "token", os.Getenv("VDL_ADMIN_TOKEN"), "admin token for changes [$VDL_ADMIN_TOKEN]")
	f.StringVar(&c.tokenFile, "token-file", os.Getenv("VDL_ADMIN_TOKEN_FILE"), "file holding the admin token [$VDL_ADMIN_TOKEN_FILE]")
	f.StringVar(&c.cert, "cert", os.Getenv("VDL_CERT"), "operator client certificate (PEM) [$VDL_CERT]")
	f.StringVar(&c.key, "key", os.Getenv("VDL_KEY"), "operator client key (PEM) [$VDL_KEY]")
}

// client builds the admin HTTP client from the credentials.
func (c *credentials) client() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.ca != "" || c.cert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.ca != "" {
			pool, err := pki.Pool(c.ca)
			if err != nil {
				return nil, fmt.Errorf("--ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		if c.cert != "" || c.key != "" {
			pair, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				return nil, fmt.Errorf("--cert/--key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
	}
	token := c.token
	if token == "" && c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	var rt http.RoundTripper = tr
	if token != "" {
		rt = pki.Bearer{Token: token, Next: tr}
	}
	return &http.Client{Timeout: 15 * time.Second, Transport: rt}, nil
}

// scheme is the admin HTTP's scheme: https once a CA is given.
func (c *credentials) scheme() string {
	if c.ca != "" {
		return "https"
	}
	return "http"
}
