package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// The gate passes only when every script passes: a script the runner
// cannot finish (power loss needs the failpoint build) fails it too; the
// simulator's seed list is not a script.
func TestGate(t *testing.T) {
	bin := proccluster.Production.Path(t)
	dir := t.TempDir()
	copyScript := func(sub, name string) string {
		d := filepath.Join(dir, sub)
		require.NoError(t, os.MkdirAll(d, 0o755))
		b, err := os.ReadFile(filepath.Join("..", "..", "testcases", name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(d, name), b, 0o644))
		return d
	}
	good := copyScript("good", "produce_and_check.txt")
	require.NoError(t, os.WriteFile(filepath.Join(good, "sim-seeds.txt"), []byte("1\n"), 0o644))
	incomplete := copyScript("incomplete", "power_loss.txt")

	scripts, err := gateScripts([]string{good})
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(good, "produce_and_check.txt")}, scripts)

	var out, errOut bytes.Buffer
	report := filepath.Join(dir, "report.md")
	require.Equal(t, 0, gate([]string{"--bin", bin, "--reports", filepath.Join(dir, "reports"), "--report", report, good}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "release gate: PASS")
	b, err := os.ReadFile(report)
	require.NoError(t, err)
	require.Contains(t, string(b), "**Release gate: PASS**")

	out.Reset()
	require.Equal(t, 1, gate([]string{"--bin", bin, "--reports", filepath.Join(dir, "reports"), "--report", report, incomplete}, &out, &errOut))
	require.Contains(t, out.String(), "release gate: FAIL: power_loss INCOMPLETE")
}

// The replay command names the binary, the network, a replaced duration
// and the canary the servers ran.
func TestReplayCommand(t *testing.T) {
	require.Equal(t, "vdl-jepsen run --bin bin/vdl --net auto x.yaml", replayCommand("bin/vdl", "x.yaml", "auto", 0))
	t.Setenv("VDL_CANARY", "ack-before-fsync")
	require.Equal(t, "VDL_CANARY=ack-before-fsync vdl-jepsen run --bin b --net netns --duration 30m0s x.txt", replayCommand("b", "x.txt", "netns", 30*time.Minute))
}

// The gate fails on a canary (the failpoint build's ack-before-fsync:
// appends reported durable before their fsync, which the servers run when
// VDL_CANARY names it) and its reports name the anomaly: the Markdown
// report, and the run's summary.json under --reports.
func TestGateCatchesCanary(t *testing.T) {
	bin := proccluster.Failpoint.Path(t)
	dir := t.TempDir()
	campaigns := filepath.Join(dir, "campaigns")
	require.NoError(t, os.MkdirAll(campaigns, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(campaigns, "power.yaml"), []byte(`cluster: {servers: 3, net: loopback}
workload: {producers: 3}
nemesis: {faults: [power-loss], interval: 1500ms, seed: 2}
duration: 6s
`), 0o644))
	t.Setenv("VDL_CANARY", "ack-before-fsync")
	var out, errOut bytes.Buffer
	report := filepath.Join(dir, "report.md")
	reports := filepath.Join(dir, "reports")
	require.Equal(t, 1, gate([]string{"--bin", bin, "--reports", reports, "--progress", "0", "--report", report, campaigns}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "release gate: FAIL: power FAIL")
	md, err := os.ReadFile(report)
	require.NoError(t, err)
	require.Contains(t, string(md), "lost what it had reported durable")
	sums, err := filepath.Glob(filepath.Join(reports, "power-*", "summary.json"))
	require.NoError(t, err)
	require.Len(t, sums, 1)
	b, err := os.ReadFile(sums[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"verdict": "FAIL"`)
	require.Contains(t, string(b), "lost what it had reported durable")
	require.Contains(t, string(b), "VDL_CANARY=ack-before-fsync vdl-jepsen run")
}
