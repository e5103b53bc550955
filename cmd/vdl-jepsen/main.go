// Command vdl-jepsen runs cluster scenario scripts (testcases/*.txt)
// against real `vdl server` processes on the loopback and writes a
// Markdown report (package campaign, jepsen-like/):
//
//	vdl-jepsen run [--bin bin/vdl] [--report FILE] testcases/kill_restart_leader.txt ...
//	vdl-jepsen gate [--bin bin/failpoint/vdl] [--report FILE] [DIR...]
//
// run exits 1 when a script FAILs (something that must hold did not), 0
// otherwise; INCOMPLETE scripts (steps the runner cannot do yet) are
// reported as such. gate is the release gate (make gate): every script of
// the directories (default testcases and jepsen-like/campaigns; the
// simulator's seed list excepted) against the failpoint build, and it
// passes only if every one PASSes — a script the runner could not finish
// fails the gate too.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	campaign "github.com/vdl-project/vdl/jepsen-like"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "run" && args[0] != "gate" && args[0] != "cleanup") {
		fmt.Fprintln(stderr, "usage: vdl-jepsen run [--bin bin/vdl] [--net auto] [--reports reports] [--report FILE] CAMPAIGN.txt|.yaml...\n       vdl-jepsen gate [--bin bin/failpoint/vdl] [--report FILE] [DIR...]\n       vdl-jepsen cleanup [--all]")
		return 2
	}
	if args[0] == "cleanup" {
		return cleanup(args[1:], stdout, stderr)
	}
	if args[0] == "gate" {
		return gate(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/vdl", "the vdl binary to run")
	report := fs.String("report", "", "write the Markdown report to this file (default: stdout)")
	verbose := fs.Bool("v", false, "log what the harness does")
	reports := fs.String("reports", "reports", "a directory per run goes under it (<campaign>-<timestamp>/), with index.html over all runs; empty: none")
	progress := fs.Duration("progress", 5*time.Second, "a progress line on stderr this often (0: none)")
	netMode := fs.String("net", "auto", "the cluster's network: netns (root: a namespace per server, DCs, latency by tc netem or the userspace WAN, nft partitions), loopback, or auto (netns when root); a script's start-cluster net= wins")
	duration := fs.Duration("duration", 0, "replace every workload's duration (0: the campaign's own)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "vdl-jepsen run: name at least one script")
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stderr, "vdl-jepsen: --bin %s: %v (make build makes bin/vdl)\n", *bin, err)
		return 2
	}
	sigs := interrupts(stderr)
	var results []campaign.Result
	for _, path := range fs.Args() {
		res, err := runScript(*bin, path, runOpts{verbose: *verbose, log: stderr, reports: *reports, progress: *progress, net: *netMode, duration: *duration, signals: sigs})
		if err != nil {
			fmt.Fprintf(stderr, "vdl-jepsen: %s: %v\n", path, err)
			return 2
		}
		results = append(results, res)
		printVerdict(stderr, res)
	}
	out := stdout
	if *report != "" {
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
		out = f
	}
	campaign.WriteReport(out, *bin, results)
	if strings.Contains(campaign.Summary(results), "FAIL") {
		return 1
	}
	return 0
}

// runOpts are how a script runs.
type runOpts struct {
	verbose  bool
	log      io.Writer
	reports  string        // a run directory goes under it; "" none
	progress time.Duration // 0: no progress line
	net      string        // loopback, netns or auto
	duration time.Duration // 0: each workload's own
	signals  <-chan os.Signal
}

// interrupts are SIGINT and SIGTERM, which end a campaign cleanly; a
// stale leftover of a run that died (its process gone) is swept first.
func interrupts(log io.Writer) <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	if os.Geteuid() == 0 {
		removed, err := campaign.Sweep(false)
		if len(removed) > 0 {
			fmt.Fprintf(log, "vdl-jepsen: removed what dead runs left: %s\n", strings.Join(removed, ", "))
		}
		if err != nil {
			fmt.Fprintf(log, "vdl-jepsen: sweeping leftovers: %v\n", err)
		}
	}
	return ch
}

func runScript(bin, path string, o runOpts) (campaign.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return campaign.Result{}, err
	}
	cmds, err := campaign.ParseFile(path, f)
	f.Close()
	if err != nil {
		return campaign.Result{}, err
	}
	t := newHarness(o.verbose, o.log)
	name := campaign.CampaignName(path)
	opts := campaign.Options{Replay: replayCommand(bin, path, o.net, o.duration), Net: o.net, Duration: o.duration}
	if o.reports != "" {
		opts.ReportDir = filepath.Join(o.reports, campaign.RunDirName(name, time.Now()))
	}
	if o.progress > 0 {
		opts.Progress, opts.ProgressEvery = o.log, o.progress
	}
	var mu sync.Mutex
	var kill func()
	opts.Started = func(k func()) { mu.Lock(); kill = k; mu.Unlock() }
	done := make(chan campaign.Result, 1)
	go func() { done <- campaign.RunWith(t, bin, name, cmds, opts) }()
	select {
	case res := <-done:
		t.cleanup()
		return res, nil
	case sig := <-o.signals:
		// Ctrl-C or a SIGTERM: kill the servers, remove the namespaces and
		// mounts, run the cleanups, and exit; the run's goroutines are
		// abandoned (a Fatal in one blocks).
		fmt.Fprintf(o.log, "vdl-jepsen: %v: stopping %s and removing what it made\n", sig, name)
		t.interrupted.Store(true)
		mu.Lock()
		k := kill
		mu.Unlock()
		if k != nil {
			k() // and writes the report of the run so far
			if opts.ReportDir != "" {
				fmt.Fprintf(o.log, "report (INTERRUPTED): %s\n", filepath.Join(opts.ReportDir, "report.html"))
			}
		}
		t.cleanup()
		if left := campaign.Leftovers(os.Getpid()); len(left) > 0 {
			fmt.Fprintf(o.log, "vdl-jepsen: left behind: %s\n", strings.Join(left, ", "))
		}
		os.Exit(130)
		return campaign.Result{}, nil
	}
}

// replayCommand runs the same script on the same binary again (with the
// canary the servers inherited, if any).
func replayCommand(bin, path, net string, d time.Duration) string {
	cmd := fmt.Sprintf("vdl-jepsen run --bin %s --net %s %s", bin, net, path)
	if d > 0 {
		cmd = fmt.Sprintf("vdl-jepsen run --bin %s --net %s --duration %v %s", bin, net, d, path)
	}
	if c := os.Getenv("VDL_CANARY"); c != "" {
		cmd = "VDL_CANARY=" + c + " " + cmd
	}
	return cmd
}

// cleanup removes what campaigns left behind (namespaces, host interfaces,
// mounts named vdlj-…): those of runs whose process is gone, or with --all
// every one (no campaign may be running).
func cleanup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	all := fs.Bool("all", false, "remove every campaign's leftovers, not only those of dead runs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	removed, err := campaign.Sweep(*all)
	for _, r := range removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// printVerdict prints a script's verdict, what failed it, and where its
// report is: the lines run and gate print after each script.
func printVerdict(w io.Writer, res campaign.Result) {
	fmt.Fprintf(w, "%s: %s\n", res.Script, campaign.Verdict(res))
	if why := campaign.Why(res); why != "" {
		fmt.Fprintf(w, "  %s\n", why)
	}
	if res.Dir != "" {
		fmt.Fprintf(w, "report: %s\n", filepath.Join(res.Dir, "report.html"))
	}
}
