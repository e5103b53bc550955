package helmtest

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/pki"
)

// certsFlags finds the `vdl certs` line NOTES.txt tells the operator to
// run and returns its flags.
func certsFlags(t *testing.T, notes string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(notes, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "vdl" || f[1] != "certs" {
			continue
		}
		flags := map[string]string{}
		for i := 2; i+1 < len(f); i += 2 {
			require.True(t, strings.HasPrefix(f[i], "--"), "%q in %q", f[i], line)
			flags[strings.TrimPrefix(f[i], "--")] = strings.Trim(f[i+1], "'")
		}
		return flags
	}
	t.Fatalf("NOTES.txt has no vdl certs line:\n%s", notes)
	return nil
}

func ids(t *testing.T, s string) []uint64 {
	t.Helper()
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(f, 10, 64)
		require.NoError(t, err, s)
		out = append(out, id)
	}
	return out
}

func loadCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block, file)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

// The certificates made by the `vdl certs` line that NOTES.txt prints
// (with the real certificate code) are what every pod's TOML names, and
// they verify for the DNS names the pods reach each other's HTTPS by: a
// server calls the config servers' API, a config server the servers'
// admin API, both checking the host name.
func TestCertsCommandCoversThePods(t *testing.T) {
	for name, values := range map[string]string{"default": "", "three zones": threeZones(t)} {
		t.Run(name, func(t *testing.T) {
			m := render(t, values)
			flags := certsFlags(t, m.notes)
			dir := t.TempDir()
			require.NoError(t, pki.EnsureDir(dir, flags["cluster"], ids(t, flags["nodes"]), ids(t, flags["config-servers"]),
				strings.Split(flags["hosts"], ","), []string{"admin"}))
			pool, err := pki.Pool(filepath.Join(dir, "ca.crt"))
			require.NoError(t, err)
			// fromSecret maps a path in the pod to the file vdl certs made.
			fromSecret := func(path string) string {
				require.True(t, strings.HasPrefix(path, "/etc/vdl/tls/"), path)
				return filepath.Join(dir, strings.TrimPrefix(path, "/etc/vdl/tls/"))
			}
			verify := func(certFile, addr string) {
				host, _ := hostPort(t, addr)
				_, err := loadCert(t, fromSecret(certFile)).Verify(x509.VerifyOptions{DNSName: host, Roots: pool})
				assert.NoError(t, err, "%s for %s", certFile, host)
			}
			cs := m.statefulSets["vdl-config"]
			for _, pod := range podNames(cs) {
				cfg := configServerConfig(t, m, cs, pod)
				assert.FileExists(t, fromSecret(cfg.KeyFile))
				assert.FileExists(t, fromSecret(cfg.CAFile))
				verify(cfg.CertFile, cfg.APIListen)
			}
			sets := m.serverSets()
			require.NotEmpty(t, sets)
			for _, s := range sets {
				for _, pod := range podNames(s) {
					cfg := serverConfig(t, m, s, pod)
					assert.FileExists(t, fromSecret(cfg.TLS.KeyFile))
					verify(cfg.TLS.CertFile, cfg.AdminListen)
					verify(cfg.TLS.CertFile, cfg.KafkaAdvertise)
				}
			}
		})
	}
}

// The `vdl certs` line in the chart's README and docs/operations.md is the
// one the notes print for their example (release vdl, namespace
// streaming, default values), so the docs cannot drift from the chart.
func TestDocumentedCertsCommand(t *testing.T) {
	var want string
	for _, line := range strings.Split(render(t, "").notes, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "vdl certs ") {
			want = strings.Join(strings.Fields(line), " ")
		}
	}
	require.NotEmpty(t, want)
	for _, doc := range []string{filepath.Join(chartDir, "README.md"), "../../../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		// Join shell continuation lines, then find the command.
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		var found bool
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "vdl certs --dir certs --cluster") {
				found = true
				assert.Equal(t, want, strings.Join(strings.Fields(line), " "), doc)
			}
		}
		assert.True(t, found, "%s documents no vdl certs line", doc)
	}
}
