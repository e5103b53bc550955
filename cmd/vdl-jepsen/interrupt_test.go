package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
	campaign "github.com/vdl-project/vdl/jepsen-like"
)

// TestMain: with VDLJ_MAIN set, the test binary is vdl-jepsen (the
// interrupt test runs it as a child it can signal).
func TestMain(m *testing.M) {
	if os.Getenv("VDLJ_MAIN") != "" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	proccluster.Main(m, nil)
}

// A campaign interrupted half way (SIGINT while its servers run in their
// namespaces on size-limited data dirs, one of them possibly stopped by
// SIGSTOP or its disk full) leaves nothing behind: no namespace, no host
// interface, no mount, no server process; the report of the run so far is
// written (verdict INTERRUPTED, with the history and the server logs).
func TestInterruptLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	bin := proccluster.Production.Path(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	script := filepath.Join(dir, "long.txt")
	require.NoError(t, os.WriteFile(script, []byte(`start-cluster nodes=3 streams=1 dcs=3 net=netns disk=48
nemesis faults=pause,kill,partition,disk-full interval=700ms seed=2
workload producers=2 duration=120s
check
`), 0o644))
	cmd := exec.Command(exe, "run", "--bin", bin, "--progress", "500ms", "--reports", filepath.Join(dir, "reports"), script)
	cmd.Env = append(os.Environ(), "VDLJ_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		_, _ = campaign.Sweep(false) // the child is gone: whatever it left
	}()

	// Half way: the workload runs and the nemesis has struck at least
	// twice (a fault is in force).
	var seen []string
	deadline := time.After(60 * time.Second)
	for waiting := true; waiting; {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "vdl-jepsen ended early:\n%s", strings.Join(seen, "\n"))
			seen = append(seen, l)
			waiting = !(strings.Contains(l, "ops ok=") && !strings.Contains(l, "faults: none") && len(seen) > 4)
		case <-deadline:
			t.Fatalf("no fault in force within 60s:\n%s", strings.Join(seen, "\n"))
		}
	}
	require.NotEmpty(t, campaign.Leftovers(pid), "the run's namespaces exist before the interrupt")
	require.NotEmpty(t, serverProcesses(bin), "the servers run before the interrupt")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	go func() {
		for l := range lines {
			seen = append(seen, l)
		}
	}()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 130, ee.ExitCode())
	case <-time.After(45 * time.Second):
		t.Fatal("vdl-jepsen did not exit within 45s of SIGINT")
	}
	require.Empty(t, campaign.Leftovers(pid), "namespaces, interfaces or mounts left behind")
	require.Empty(t, serverProcesses(bin), "server processes left behind")

	// The report of the run so far.
	runs, err := filepath.Glob(filepath.Join(dir, "reports", "long-*", "summary.json"))
	require.NoError(t, err)
	require.Len(t, runs, 1, "%s", strings.Join(seen, "\n"))
	b, err := os.ReadFile(runs[0])
	require.NoError(t, err)
	var s campaign.RunSummary
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, "INTERRUPTED", s.Verdict)
	require.Positive(t, s.Ops)
	require.NotEmpty(t, s.Faults)
	require.FileExists(t, filepath.Join(filepath.Dir(runs[0]), "history.jsonl"))
	require.FileExists(t, filepath.Join(filepath.Dir(runs[0]), "report.html"))
	require.FileExists(t, filepath.Join(filepath.Dir(runs[0]), "logs", "node1.log"))
}

// serverProcesses lists the pids running bin.
func serverProcesses(bin string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			out = append(out, e.Name())
		}
	}
	return out
}
