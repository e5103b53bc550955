package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	campaign "github.com/vdl-project/vdl/jepsen-like"
)

// gateDirs are where the gate's scripts are.
var gateDirs = []string{"testcases", "jepsen-like/campaigns"}

// notScripts are .txt files of those directories that are not cluster
// scripts (the simulator's regression seeds).
var notScripts = []string{"sim-seeds.txt"}

// gate runs every script of the directories and decides the release.
func gate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/failpoint/vdl", "the failpoint build of vdl (make build-failpoint)")
	report := fs.String("report", "data/gate/report.md", "where the Markdown report goes")
	verbose := fs.Bool("v", false, "log what the harness does")
	reports := fs.String("reports", "reports", "a directory per run goes under it; empty: none")
	progress := fs.Duration("progress", 5*time.Second, "a progress line on stderr this often (0: none)")
	netMode := fs.String("net", "auto", "the clusters' network: netns, loopback, or auto (netns when root)")
	duration := fs.Duration("duration", 0, "replace every workload's duration (0: each campaign's own)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	dirs := fs.Args()
	if len(dirs) == 0 {
		dirs = gateDirs
	}
	scripts, err := gateScripts(dirs)
	if err != nil {
		fmt.Fprintf(stderr, "vdl-jepsen gate: %v\n", err)
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stderr, "vdl-jepsen gate: --bin %s: %v (make build-failpoint makes it)\n", *bin, err)
		return 2
	}
	sigs := interrupts(stderr)
	var results []campaign.Result
	for _, path := range scripts {
		res, err := runScript(*bin, path, runOpts{verbose: *verbose, log: stderr, reports: *reports, progress: *progress, net: *netMode, duration: *duration, signals: sigs})
		if err != nil {
			fmt.Fprintf(stderr, "vdl-jepsen gate: %s: %v\n", path, err)
			return 2
		}
		results = append(results, res)
		printVerdict(stderr, res)
	}
	pass, why := gateVerdict(results)
	if err := os.MkdirAll(filepath.Dir(*report), 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	f, err := os.Create(*report)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer f.Close()
	verdict := "PASS"
	if !pass {
		verdict = "FAIL: " + why
	}
	fmt.Fprintf(f, "**Release gate: %s**\n\n", verdict)
	campaign.WriteReport(f, *bin, results)
	fmt.Fprintf(stdout, "release gate: %s (report: %s)\n%s", verdict, *report, campaign.Summary(results))
	if !pass {
		return 1
	}
	return 0
}

// gateScripts lists the cluster scripts of dirs, sorted.
func gateScripts(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		var paths []string
		for _, pat := range []string{"*.txt", "*.yaml"} {
			ps, err := filepath.Glob(filepath.Join(d, pat))
			if err != nil {
				return nil, err
			}
			paths = append(paths, ps...)
		}
		for _, p := range paths {
			if !slices.Contains(notScripts, filepath.Base(p)) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scripts in %s", strings.Join(dirs, ", "))
	}
	slices.Sort(out)
	return out, nil
}

// gateVerdict passes only if every script PASSed: a FAIL is a broken
// guarantee, an INCOMPLETE a check that did not run.
func gateVerdict(results []campaign.Result) (bool, string) {
	var bad []string
	for _, r := range results {
		if v := campaign.Verdict(r); v != "PASS" {
			bad = append(bad, r.Script+" "+v)
		}
	}
	if len(bad) > 0 {
		return false, strings.Join(bad, ", ")
	}
	return true, ""
}
