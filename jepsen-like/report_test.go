package campaign

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// renderHeadless loads an HTML file in headless Chromium and returns the
// DOM after its scripts ran, and the console messages that were errors
// (an uncaught exception, console.error, a resource that did not load).
func renderHeadless(t *testing.T, path string) (dom string, consoleErrors []string) {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (.ci/run installs it)")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000",
		"--dump-dom", "file://"+abs)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.String())
	// Chromium logs console messages as `...:INFO:CONSOLE(12)] "message", source: file:///... (12)`
	// (console.log too); errors are uncaught exceptions, console.error and
	// failed loads.
	re := regexp.MustCompile(`(?m)^.*(CONSOLE|console).*$`)
	for _, line := range re.FindAllString(stderr.String(), -1) {
		if strings.Contains(line, "Uncaught") || strings.Contains(line, "ERROR") || strings.Contains(line, "Failed to load") ||
			strings.Contains(line, "error") {
			consoleErrors = append(consoleErrors, line)
		}
	}
	return string(out), consoleErrors
}

// The console check can fail: a page with an uncaught exception is caught.
func TestHeadlessCatchesConsoleErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "broken.html")
	require.NoError(t, os.WriteFile(p, []byte(`<!DOCTYPE html><html><body><p>x</p><script>noSuchFunction();</script></body></html>`), 0o644))
	dom, errs := renderHeadless(t, p)
	require.Contains(t, dom, "<p>x</p>")
	require.NotEmpty(t, errs, "an uncaught ReferenceError must show as a console error")
}

// A campaign writes its report directory: the history (every op), the
// summary (verdict, outcomes, faults, throughput), the Markdown and HTML
// reports with three figures, and an index of the runs; the HTML renders
// in headless Chromium with every figure drawn and no console error. A
// failing check adds porcupine's history.html, the server logs and data
// dirs, and the summary names the anomaly.
func TestRunReport(t *testing.T) {
	bin := proccluster.Failpoint.Path(t)
	reports := t.TempDir()
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=kill,pause interval=1200ms seed=3
workload producers=2 consumers=1 duration=5s
check
`))
	require.NoError(t, err)
	var progress strings.Builder
	dir := filepath.Join(reports, RunDirName("report", time.Now()))
	res := RunWith(t, bin, "report", cmds, Options{ReportDir: dir, Replay: "vdl-jepsen run x", Progress: &syncWriter{b: &progress}, ProgressEvery: time.Second})
	require.Equal(t, "PASS", Verdict(res))
	for _, f := range []string{"history.jsonl", "summary.json", "report.md", "report.html", "throughput.svg", "latency.svg", "outcomes.svg", "check-1/history.jsonl"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	require.NoFileExists(t, filepath.Join(dir, "history.html"), "only a failed check has one")
	require.NoDirExists(t, filepath.Join(dir, "logs"), "only a failed run keeps the logs")

	hf, err := os.Open(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	ops, err := checker.Load(hf)
	hf.Close()
	require.NoError(t, err)
	require.Empty(t, checker.Validate(ops))
	var produces, fetches int
	for _, op := range ops {
		require.GreaterOrEqual(t, op.Complete, op.Invoke)
		switch op.Kind {
		case checker.KindProduce:
			produces++
		case checker.KindFetch:
			fetches++
		}
	}
	require.Positive(t, produces)
	require.Positive(t, fetches)

	var s RunSummary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, "PASS", s.Verdict)
	require.Equal(t, len(ops), s.Ops)
	require.Empty(t, s.Anomalies)
	require.NotEmpty(t, s.Faults, "the nemesis injected faults")
	require.Positive(t, s.FaultCounts["kill"]+s.FaultCounts["pause"])
	require.Positive(t, s.Outcomes["produce franz-go"][checker.OutcomeOK])
	require.Positive(t, s.AckedPerSecond)
	require.Equal(t, "vdl-jepsen run x", s.Replay)

	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "# report: PASS")
	require.Contains(t, string(md), "Replay: `vdl-jepsen run x`")
	require.Contains(t, string(md), "## Faults injected")

	require.Regexp(t, `ops ok=[1-9]\d* failed=\d+ unknown=\d+ .*\| faults: .* \| anomalies so far: 0`, progress.String())

	dom, errs := renderHeadless(t, filepath.Join(dir, "report.html"))
	require.Empty(t, errs, "console errors rendering report.html")
	require.Contains(t, dom, `data-plots-rendered="3"`, "every figure drew")
	require.Equal(t, 3, strings.Count(dom, "<svg"), "three inline SVG figures")
	require.Contains(t, dom, ">PASS<")

	index, err := os.ReadFile(filepath.Join(reports, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(index), filepath.Base(dir)+"/report.html")

	// A failed check: a consumer's fetch that saw a value at an offset
	// where the stream holds another (forged into the history, as a server
	// serving a stale or foreign record would answer).
	t.Run("failed check", func(t *testing.T) {
		cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
produce n=5
check
`))
		require.NoError(t, err)
		dir := filepath.Join(reports, RunDirName("forged", time.Now()))
		forge := func(r *runner, cmd Command) {
			if cmd.Name == "check" {
				h := r.history.Invoke(checker.Op{Kind: checker.KindFetch, Stream: "s1", Client: 99, Conn: 99, From: 2})
				h.FetchOK([]checker.Record{{Offset: 2, Value: "never-produced"}}, -1)
			}
		}
		res := RunWith(t, bin, "forged", cmds, Options{ReportDir: dir, beforeStep: forge})
		require.Equal(t, "FAIL", Verdict(res))
		require.FileExists(t, filepath.Join(dir, "history.html"))
		require.FileExists(t, filepath.Join(dir, "logs", "node1.log"))
		require.Len(t, res.Summary.DataDirs, 3)
		tgz, err := os.Open(filepath.Join(dir, "logs", "node1-data.tar.gz"))
		require.NoError(t, err)
		defer tgz.Close()
		gz, err := gzip.NewReader(tgz)
		require.NoError(t, err)
		var names []string
		for tr := tar.NewReader(gz); ; {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			names = append(names, h.Name)
		}
		require.Contains(t, strings.Join(names, " "), "node1/streams/1/", "the data dir's stream files")
		require.Contains(t, strings.Join(res.Summary.Anomalies, "\n"), "history check")
		dom, errs := renderHeadless(t, filepath.Join(dir, "report.html"))
		require.Empty(t, errs)
		require.Contains(t, dom, ">FAIL<")
		require.Contains(t, dom, `href="history.html"`)
		index, err := os.ReadFile(filepath.Join(reports, "index.html"))
		require.NoError(t, err)
		require.Contains(t, string(index), filepath.Base(dir))
	})
}

// A failed run says which step failed and why; a passing one says nothing.
func TestWhyNamesTheFirstFailingStep(t *testing.T) {
	ok := Step{Command: Command{Line: 1, Name: "start"}}
	bad := Step{Command: Command{Line: 4, Name: "produce", Args: []string{"s"}}, Err: errors.New("server 2 exited")}
	later := Step{Command: Command{Line: 5, Name: "check"}, Err: errors.New("later")}
	require.Equal(t, "", Why(Result{Steps: []Step{ok}}))
	require.Equal(t, `line 4 "produce s": server 2 exited`, Why(Result{Steps: []Step{ok, bad, later}}))
	require.Equal(t, "", Why(Result{Steps: []Step{{Command: Command{Line: 2, Name: "partition"}, Err: errUnsupported}}}))
}
