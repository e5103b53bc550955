package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// metricNames are the series this server exports: its registry, the raft
// gauges read at scrape time, and Prometheus's own "up".
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	m := newMetrics()
	fams, err := m.reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{"up": true, "vdl_server_fail_stopped": true}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for _, g := range raftGauges {
		names[g.name] = true
	}
	for _, g := range groupSeries {
		names[g] = true
	}
	desc := make(chan *prometheus.Desc, 16)
	newStreamCollector(nil).Describe(desc)
	close(desc)
	for d := range desc {
		names[descName(d)] = true
	}
	return names
}

var seriesName = regexp.MustCompile(`\b((?:vdl|process|go)_[a-z0-9_]+|up)\b`)

// requireKnownSeries: every series an expression names exists (a histogram
// through its _bucket, _sum and _count series).
func requireKnownSeries(t *testing.T, names map[string]bool, where, expr string) {
	t.Helper()
	for _, s := range seriesName.FindAllString(expr, -1) {
		base := s
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(s, suffix); ok && names[b] {
				base = b
			}
		}
		require.True(t, names[base], "%s names %s, which VDL does not export: %s", where, s, expr)
	}
}

// promtoolRules runs `promtool check rules` on a file.
func promtoolRules(t *testing.T, path string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
	}
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "promtool check rules %s:\n%s", path, out)
}

// The alerting rules and the Grafana dashboard under deploy/ name only
// series VDL exports, and every expression parses (promtool: the
// dashboard's expressions are checked as recording rules).
func TestDeployRulesAndDashboard(t *testing.T) {
	names := metricNames(t)

	rules, err := os.ReadFile("../deploy/prometheus/vdl-alerts.yml")
	require.NoError(t, err)
	exprs := regexp.MustCompile(`(?m)^\s+expr:\s*(.+)$`).FindAllStringSubmatch(string(rules), -1)
	require.NotEmpty(t, exprs)
	for _, e := range exprs {
		requireKnownSeries(t, names, "vdl-alerts.yml", e[1])
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile("../deploy/grafana/vdl-dashboard.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.Panels)
	var asRules strings.Builder
	asRules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for j, tg := range p.Targets {
			requireKnownSeries(t, names, "panel "+p.Title, tg.Expr)
			q, _ := json.Marshal(tg.Expr)
			fmt.Fprintf(&asRules, "      - record: dashboard:panel%d_%d\n        expr: %s\n", i, j, q)
		}
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), []byte(asRules.String()), 0o644))
	promtoolRules(t, "../deploy/prometheus/vdl-alerts.yml")
	promtoolRules(t, filepath.Join(dir, "dashboard-rules.yml"))
}
