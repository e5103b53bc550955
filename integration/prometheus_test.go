package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/testnet"
)

// TestPrometheusScrapesTheCluster: a real Prometheus server (Debian's
// prometheus package, which .ci/run installs) scrapes the three servers'
// /metrics over HTTPS, trusting the cluster CA, and a PromQL query returns
// the records produced on the stream and the stream's leader.
func TestPrometheusScrapesTheCluster(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
	}
	c := StartCluster(t, Options{})
	dir := t.TempDir()
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, fmt.Sprintf("%q", strings.TrimPrefix(n.AdminBase, "https://")))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vdl
    scheme: https
    tls_config:
      ca_file: %s
    static_configs:
      - targets: [%s]
`, filepath.Join(c.Certs, "ca.crt"), strings.Join(targets, ", "))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644))
	port := testnet.FreePorts(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()

	const n = 50
	produceValues(t, c, values(n, "prom-"))

	query := func(q string) (float64, bool) {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&out) != nil || out.Status != "success" || len(out.Data.Result) == 0 {
			return 0, false
		}
		s, _ := out.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		v, ok := query(`sum(vdl_stream_produced_records_total{stream="s1"})`)
		assert.True(ct, ok, "no answer yet")
		assert.Equal(ct, float64(n), v, "records produced on s1, as Prometheus scraped them")
	}, 30*time.Second, 500*time.Millisecond, "prometheus log: %s", filepath.Join(dir, "prometheus.log"))
	// Every target scraped, one leader of s1 among them (a target's
	// first scrape may come a moment after another's).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		up, ok := query(`sum(up{job="vdl"})`)
		assert.True(ct, ok)
		assert.Equal(ct, 3.0, up, "every server scraped")
		leaders, ok := query(`sum(vdl_raft_is_leader{stream="s1"})`)
		assert.True(ct, ok)
		assert.Equal(ct, 1.0, leaders, "one leader of s1 among the three servers")
		gogc, ok := query(`max(go_gc_gogc_percent{job="vdl"}) + min(go_gc_gogc_percent{job="vdl"})`)
		assert.True(ct, ok)
		assert.Equal(ct, 400.0, gogc, "every server process collects at GOGC 200 (server.TuneGC)")
	}, 15*time.Second, 500*time.Millisecond)
}
