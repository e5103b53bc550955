package campaign

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vdl-project/vdl/checker"
)

// A run's report directory (reports/<campaign>-<timestamp>/):
//
//	history.jsonl   every operation as the clients saw it (checker.Save)
//	summary.json    RunSummary: verdict, outcomes, anomalies, faults, throughput
//	report.md       the same for a person, with each step's output
//	report.html     that with the figures (SVG, gonum/plot) inline
//	*.svg           the figures
//	check-N/        the checker's own files for the N-th check
//	history.html    porcupine's visualisation, when a check failed
//	logs/           the servers' logs, when the run failed or was
//	                interrupted, and their data dirs (nodeN-data.tar.gz,
//	                taken after a SIGTERM) when it failed
//
// and reports/index.html lists every run of the directory.

// RunSummary is summary.json.
type RunSummary struct {
	Campaign        string  `json:"campaign"`
	Verdict         string  `json:"verdict"`
	Started         string  `json:"started"`
	DurationSeconds float64 `json:"duration_s"`
	Binary          string  `json:"binary"`
	Net             string  `json:"net"`
	// Shaper is what applied the latency matrix between DCs: "netem" (tc
	// netem), "userspace" (the userspace WAN, a TUN device), or empty.
	Shaper string `json:"shaper,omitempty"`
	// PreferredDC is the config servers' balancer liveness at the end:
	// how long every stream's leader took to be back in its preferred DC.
	PreferredDC string `json:"preferred_dc,omitempty"`
	Replay      string `json:"replay"`
	// Outcomes counts operations by operation and client ("produce
	// franz-go") and outcome (ok, fail, info: unknown).
	Outcomes map[string]map[checker.Outcome]int `json:"outcomes"`
	Ops      int                                `json:"ops"`
	// Throughput: acknowledged produces and records read per second of
	// the run.
	AckedPerSecond    float64           `json:"acked_per_s"`
	RecordsReadPerSec float64           `json:"records_read_per_s"`
	ProduceP50Millis  float64           `json:"produce_p50_ms"`
	ProduceP99Millis  float64           `json:"produce_p99_ms"`
	Faults            []faultSummary    `json:"faults"`
	FaultCounts       map[string]int    `json:"fault_counts"`
	Anomalies         []string          `json:"anomalies"` // every broken guarantee found; empty when PASS
	Incomplete        []string          `json:"incomplete,omitempty"`
	Checks            []*checker.Result `json:"checks,omitempty"`
	HistoryHTML       string            `json:"history_html,omitempty"`
	Logs              []string          `json:"logs,omitempty"`
	DataDirs          []string          `json:"data_dirs,omitempty"` // the servers' data dirs (tar.gz), when the run failed
}

type faultSummary struct {
	Kind   string  `json:"kind"`
	Detail string  `json:"detail"`
	Start  float64 `json:"start_s"`
	End    float64 `json:"end_s"`
}

// writeRunDir writes the run's report directory (the cluster still runs:
// its logs are copied from there on failure).
func (r *runner) writeRunDir(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	end := r.now()
	ops := r.history.History()
	faults := r.faultWindows(end)
	if err := writeHistory(filepath.Join(dir, "history.jsonl"), ops); err != nil {
		return err
	}
	names, counts := outcomeCounts(ops, r.clientOf)
	s := &RunSummary{
		Campaign: res.Script, Verdict: verdict(*res), Started: r.t0.UTC().Format(time.RFC3339),
		DurationSeconds: seconds(end), Binary: r.bin, Replay: r.opts.Replay, Outcomes: counts, Ops: len(ops),
		FaultCounts: map[string]int{}, Anomalies: []string{}, Checks: r.checkResults(), Net: "loopback",
	}
	if r.net != nil {
		s.Net = "netns " + r.net.Describe()
		s.Shaper = r.net.Shaper()
	}
	r.mu.Lock()
	s.PreferredDC = r.liveness
	r.mu.Unlock()
	var lat []float64
	var acked, read int
	for _, op := range ops {
		if op.Kind == checker.KindProduce && op.Outcome == checker.OutcomeOK {
			acked++
			lat = append(lat, float64(op.Complete-op.Invoke)/1e6)
		}
		if op.Kind == checker.KindFetch && op.Outcome == checker.OutcomeOK {
			read += len(op.Records)
		}
	}
	if end > 0 {
		s.AckedPerSecond = float64(acked) / seconds(end)
		s.RecordsReadPerSec = float64(read) / seconds(end)
	}
	if len(lat) > 0 {
		s.ProduceP50Millis, s.ProduceP99Millis = quantile(lat, 0.5), quantile(lat, 0.99)
	}
	for _, f := range faults {
		s.Faults = append(s.Faults, faultSummary{f.Kind, f.Detail, seconds(f.Start), seconds(f.End)})
		s.FaultCounts[f.Kind]++
	}
	for _, st := range res.Steps {
		switch {
		case st.Err == nil:
		case errors.Is(st.Err, errUnsupported):
			s.Incomplete = append(s.Incomplete, fmt.Sprintf("%s: %v", st.Command, st.Err))
		default:
			s.Anomalies = append(s.Anomalies, fmt.Sprintf("%s: %v", st.Command, st.Err))
		}
	}
	for _, c := range s.Checks {
		if c.HTMLPath == "" {
			continue
		}
		if err := copyFile(c.HTMLPath, filepath.Join(dir, "history.html")); err == nil {
			s.HistoryHTML = "history.html"
		} else if rel, err := filepath.Rel(dir, c.HTMLPath); err == nil {
			s.HistoryHTML = rel
		}
	}
	if (s.Verdict == "FAIL" || s.Verdict == "INTERRUPTED") && r.c != nil {
		if s.Verdict == "FAIL" {
			// The run is over: stop the servers (SIGTERM; a stopped one is
			// continued first) so that their data dirs are kept as they
			// left them.
			for _, n := range r.c.Nodes {
				r.c.Resume(n.ID)
			}
			r.c.StopAll()
		}
		logs := filepath.Join(dir, "logs")
		if err := os.MkdirAll(logs, 0o755); err == nil {
			for _, n := range r.c.Nodes {
				dst := filepath.Join(logs, filepath.Base(n.LogPath))
				if copyFile(n.LogPath, dst) == nil {
					s.Logs = append(s.Logs, filepath.Join("logs", filepath.Base(n.LogPath)))
				}
				if s.Verdict != "FAIL" {
					continue
				}
				name := fmt.Sprintf("node%d-data.tar.gz", n.ID)
				if err := archiveDir(n.DataDir, filepath.Join(logs, name)); err == nil {
					s.DataDirs = append(s.DataDirs, filepath.Join("logs", name))
				} else {
					s.Logs = append(s.Logs, fmt.Sprintf("(n%d's data dir not kept: %v)", n.ID, err))
				}
			}
		}
	}
	res.Summary = s

	var figs []figure
	for _, mk := range []func() (figure, error){
		func() (figure, error) { return throughputFigure(ops, faults, end) },
		func() (figure, error) { return latencyFigure(ops, faults, end) },
		func() (figure, error) { return outcomeFigure(names, counts) },
	} {
		f, err := mk()
		if err != nil {
			return err
		}
		figs = append(figs, f)
		if err := os.WriteFile(filepath.Join(dir, f.Name+".svg"), f.SVG, 0o644); err != nil {
			return err
		}
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), js, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	writeRunMarkdown(&md, s, *res)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	if err := writeRunHTML(f, s, *res, figs, md.String()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return WriteIndex(filepath.Dir(dir))
}

func (r *runner) checkResults() []*checker.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.checks)
}

// archiveDir writes dir as a gzipped tar (regular files and directories;
// a preallocated segment's zeros compress to little).
func archiveDir(dir, dst string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	werr := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(filepath.Dir(dir), p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.CopyN(tw, in, fi.Size())
		return err
	})
	return errors.Join(werr, tw.Close(), gz.Close(), f.Close())
}

func writeHistory(path string, ops []checker.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := checker.Save(f, ops); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeRunMarkdown(w io.Writer, s *RunSummary, res Result) {
	fmt.Fprintf(w, "# %s: %s\n\n", s.Campaign, s.Verdict)
	fmt.Fprintf(w, "Started %s, ran %.1f s, binary `%s`, network %s.\n\n", s.Started, s.DurationSeconds, s.Binary, s.Net)
	if s.PreferredDC != "" {
		fmt.Fprintf(w, "Control plane: %s.\n\n", s.PreferredDC)
	}
	if s.Replay != "" {
		fmt.Fprintf(w, "Replay: `%s`\n\n", s.Replay)
	}
	fmt.Fprintf(w, "%d operations; %.1f produces acknowledged/s, %.1f records read/s; acknowledged produce latency p50 %.1f ms, p99 %.1f ms.\n\n",
		s.Ops, s.AckedPerSecond, s.RecordsReadPerSec, s.ProduceP50Millis, s.ProduceP99Millis)
	fmt.Fprintln(w, "| operation | ok | failed | unknown |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range slices.Sorted(mapsKeys(s.Outcomes)) {
		c := s.Outcomes[k]
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", k, c[checker.OutcomeOK], c[checker.OutcomeFail], c[checker.OutcomeInfo])
	}
	fmt.Fprintln(w)
	if len(s.Anomalies) == 0 {
		fmt.Fprintln(w, "Anomalies: none.")
	} else {
		fmt.Fprintln(w, "## Anomalies")
		fmt.Fprintln(w)
		for _, a := range s.Anomalies {
			fmt.Fprintf(w, "- %s\n", a)
		}
	}
	for _, a := range s.Incomplete {
		fmt.Fprintf(w, "- not done (INCOMPLETE): %s\n", a)
	}
	fmt.Fprintln(w)
	if len(s.Faults) > 0 {
		fmt.Fprintf(w, "## Faults injected (%d)\n\n| kind | where | from (s) | to (s) |\n|---|---|---|---|\n", len(s.Faults))
		for _, f := range s.Faults {
			fmt.Fprintf(w, "| %s | %s | %.2f | %.2f |\n", f.Kind, f.Detail, f.Start, f.End)
		}
		fmt.Fprintln(w)
	}
	if s.HistoryHTML != "" {
		fmt.Fprintf(w, "Porcupine's visualisation of the failed check: [%s](%s)\n\n", s.HistoryHTML, s.HistoryHTML)
	}
	if len(s.Logs) > 0 {
		fmt.Fprintf(w, "Server logs: %s\n\n", strings.Join(s.Logs, ", "))
	}
	if len(s.DataDirs) > 0 {
		fmt.Fprintf(w, "Server data dirs: %s\n\n", strings.Join(s.DataDirs, ", "))
	}
	fmt.Fprintln(w, "## Steps")
	for _, st := range res.Steps {
		fmt.Fprintf(w, "\n`%s` (line %d, %v)\n", st.Command, st.Command.Line, st.Took.Round(time.Millisecond))
		if st.Output != "" {
			fmt.Fprintf(w, "\n```\n%s\n```\n", st.Output)
		}
		if st.Err != nil {
			fmt.Fprintf(w, "\n**%s**: %v\n", stepVerdict(st), st.Err)
		}
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var runHTML = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.S.Campaign}}: {{.S.Verdict}}</title>
<style>
body { font-family: sans-serif; max-width: 64rem; margin: 1rem auto; padding: 0 1rem; }
.PASS { color: #0a0; } .FAIL { color: #c00; } .INCOMPLETE, .INTERRUPTED { color: #c80; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
figure { margin: 1rem 0; } figure svg { width: 100%; height: auto; }
pre { background: #f6f6f6; padding: .5rem; overflow-x: auto; }
</style></head>
<body data-plots-expected="{{len .Figs}}">
<h1>{{.S.Campaign}}: <span class="{{.S.Verdict}}">{{.S.Verdict}}</span></h1>
<p>Started {{.S.Started}}, ran {{printf "%.1f" .S.DurationSeconds}} s; network {{.S.Net}}; binary <code>{{.S.Binary}}</code>.</p>
{{if .S.Replay}}<p>Replay: <code id="replay">{{.S.Replay}}</code></p>{{end}}
<p>{{.S.Ops}} operations; {{printf "%.1f" .S.AckedPerSecond}} produces acknowledged/s, {{printf "%.1f" .S.RecordsReadPerSec}} records read/s;
acknowledged produce latency p50 {{printf "%.1f" .S.ProduceP50Millis}} ms, p99 {{printf "%.1f" .S.ProduceP99Millis}} ms.</p>
<h2>Anomalies</h2>
{{if .S.Anomalies}}<ul id="anomalies">{{range .S.Anomalies}}<li>{{.}}</li>{{end}}</ul>{{else}}<p id="anomalies">None.</p>{{end}}
{{if .S.Incomplete}}<p>Not done (INCOMPLETE):</p><ul>{{range .S.Incomplete}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .S.HistoryHTML}}<p>Porcupine's visualisation of the failed check: <a href="{{.S.HistoryHTML}}">{{.S.HistoryHTML}}</a></p>{{end}}
{{if .S.Logs}}<p>Server logs: {{range .S.Logs}}<a href="{{.}}">{{.}}</a> {{end}}</p>{{end}}
{{if .S.DataDirs}}<p>Server data dirs: {{range .S.DataDirs}}<a href="{{.}}">{{.}}</a> {{end}}</p>{{end}}
<h2>Figures</h2>
{{range .Figs}}<figure class="plot" id="fig-{{.Name}}"><figcaption>{{.Title}}</figcaption>{{.Inline}}</figure>
{{end}}
<h2>Outcomes</h2>
<table><tr><th>operation</th><th>ok</th><th>failed</th><th>unknown</th></tr>
{{range .Outcomes}}<tr><td>{{.Name}}</td><td>{{.OK}}</td><td>{{.Fail}}</td><td>{{.Info}}</td></tr>{{end}}</table>
{{if .S.Faults}}<h2>Faults injected ({{len .S.Faults}})</h2>
<table><tr><th>kind</th><th>where</th><th>from (s)</th><th>to (s)</th></tr>
{{range .S.Faults}}<tr><td>{{.Kind}}</td><td>{{.Detail}}</td><td>{{printf "%.2f" .Start}}</td><td>{{printf "%.2f" .End}}</td></tr>{{end}}</table>{{end}}
<h2>Report</h2>
<pre>{{.Markdown}}</pre>
<p><a href="summary.json">summary.json</a> · <a href="history.jsonl">history.jsonl</a> · <a href="report.md">report.md</a> · <a href="../index.html">all runs</a></p>
<script>
// Counts the figures that rendered (an SVG with a non-empty box), for
// the headless-browser test and for a reader's console.
window.addEventListener("load", function () {
  var n = 0;
  document.querySelectorAll("figure.plot svg").forEach(function (s) {
    var b = s.getBBox();
    if (b.width > 0 && b.height > 0) { n++; }
  });
  document.body.setAttribute("data-plots-rendered", String(n));
});
</script>
</body></html>
`))

type outcomeRow struct {
	Name           string
	OK, Fail, Info int
}

func writeRunHTML(w io.Writer, s *RunSummary, res Result, figs []figure, md string) error {
	type fig struct {
		Name, Title string
		Inline      template.HTML
	}
	var fs []fig
	for _, f := range figs {
		fs = append(fs, fig{f.Name, f.Title, template.HTML(f.SVG)}) // our own gonum/plot output
	}
	var rows []outcomeRow
	for _, k := range slices.Sorted(mapsKeys(s.Outcomes)) {
		c := s.Outcomes[k]
		rows = append(rows, outcomeRow{k, c[checker.OutcomeOK], c[checker.OutcomeFail], c[checker.OutcomeInfo]})
	}
	return runHTML.Execute(w, map[string]any{"S": s, "Figs": fs, "Outcomes": rows, "Markdown": md})
}

var indexHTML = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>VDL campaign runs</title>
<style>body { font-family: sans-serif; margin: 1rem; } table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 2px 8px; } .PASS { color: #0a0; } .FAIL { color: #c00; } .INCOMPLETE, .INTERRUPTED { color: #c80; }</style>
</head><body><h1>VDL campaign runs</h1>
<table><tr><th>run</th><th>verdict</th><th>started</th><th>seconds</th><th>ops</th><th>acked/s</th><th>faults</th><th>anomalies</th></tr>
{{range .}}<tr><td><a href="{{.Dir}}/report.html">{{.Dir}}</a></td><td class="{{.S.Verdict}}">{{.S.Verdict}}</td><td>{{.S.Started}}</td>
<td>{{printf "%.0f" .S.DurationSeconds}}</td><td>{{.S.Ops}}</td><td>{{printf "%.0f" .S.AckedPerSecond}}</td><td>{{len .S.Faults}}</td><td>{{len .S.Anomalies}}</td></tr>
{{end}}</table></body></html>
`))

// WriteIndex writes root/index.html: every run directory of root (one
// with a summary.json), newest first.
func WriteIndex(root string) error {
	dirs, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	type run struct {
		Dir string
		S   RunSummary
	}
	var runs []run
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(root, d.Name(), "summary.json"))
		if err != nil || !d.IsDir() {
			continue
		}
		var s RunSummary
		if json.Unmarshal(b, &s) == nil {
			runs = append(runs, run{d.Name(), s})
		}
	}
	slices.SortFunc(runs, func(a, b run) int { return strings.Compare(b.S.Started+b.Dir, a.S.Started+a.Dir) })
	f, err := os.Create(filepath.Join(root, "index.html"))
	if err != nil {
		return err
	}
	if err := indexHTML.Execute(f, runs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// RunDirName is a run's directory name: the campaign and a UTC timestamp.
func RunDirName(campaign string, t time.Time) string {
	return campaign + "-" + t.UTC().Format("20060102T150405Z")
}
