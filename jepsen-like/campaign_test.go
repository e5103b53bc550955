package campaign

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
)

func TestMain(m *testing.M) {
	if netHelper() {
		return
	}
	proccluster.Main(m, nil)
}

// The cluster scripts the simulator replays run against real processes
// too: every acknowledged record is found at its offset once the replicas
// agree, and a server whose power was cut kept what it had reported
// durable. Partitions and power losses need the failpoint build: with the
// production build those scripts come out INCOMPLETE, never PASS; with the
// failpoint build they pass.
func TestScriptsAgainstRealProcesses(t *testing.T) {
	prod, fp := proccluster.Production.Path(t), proccluster.Failpoint.Path(t)
	for _, tc := range []struct{ script, bin, want string }{
		{"produce_and_check", prod, "PASS"},
		{"kill_restart_leader", prod, "PASS"},
		{"rolling_restart", prod, "PASS"},
		{"partition_minority", prod, "INCOMPLETE"},
		{"partition_minority", fp, "PASS"},
		{"power_loss", prod, "INCOMPLETE"},
		{"power_loss", fp, "PASS"},
	} {
		t.Run(tc.script+"/"+tc.want, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "testcases", tc.script+".txt"))
			require.NoError(t, err)
			cmds, err := Parse(f)
			f.Close()
			require.NoError(t, err)
			res := Run(t, tc.bin, tc.script, cmds)
			var report strings.Builder
			WriteReport(&report, tc.bin, []Result{res})
			require.Equal(t, tc.want, Verdict(res), "%s", report.String())
			for _, s := range res.Steps {
				if s.Command.Name == "check" {
					require.NoError(t, s.Err)
					require.Contains(t, s.Output, "lost 0, at another offset 0, duplicated 0")
					require.Contains(t, s.Output, "linearizable, no anomaly")
				}
			}
		})
	}
}

// check finds what it must: a value acknowledged but missing, one at
// another offset, one stored twice.
func TestJudge(t *testing.T) {
	r := &runner{acked: map[string][]ack{"s1": {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}}}
	got := map[int64]string{0: "a", 1: "c", 2: "x", 3: "d", 4: "d"}
	lost, moved, dup := r.judge("s1", got)
	require.Equal(t, 1, lost, "b")
	require.Equal(t, 1, moved, "c at 1, acknowledged at 2")
	require.Equal(t, 1, dup, "d twice")
}

func TestParse(t *testing.T) {
	cmds, err := Parse(strings.NewReader("# comment\nstart-cluster nodes=3\n----\nexpected\noutput\n\nkill leader stream=s2\n----\nx\n\ncheck\n"))
	require.NoError(t, err)
	require.Len(t, cmds, 3)
	require.Equal(t, "start-cluster", cmds[0].Name)
	require.Equal(t, "3", cmds[0].Keys["nodes"])
	require.Equal(t, []string{"leader"}, cmds[1].Args)
	require.Equal(t, "s2", cmds[1].Keys["stream"])
	require.Equal(t, 7, cmds[1].Line)
	_, err = Parse(strings.NewReader("# nothing\n"))
	require.Error(t, err)
	require.True(t, errors.Is(errUnsupported, errUnsupported))
}

// A campaign: producers write and consumers read for a while the nemesis
// kills a node, cuts a node's power (after stalling its fsyncs), cuts a
// node off or stops it (SIGSTOP), one fault at a time; every acknowledged record survives at its offset, restarted
// nodes kept what they reported durable, and the history of every produce
// is linearizable. (jepsen-like/campaigns/nemesis_mix.txt is the longer
// run: 20 s.)
func TestNemesisCampaign(t *testing.T) {
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=kill,power-loss,partition,pause interval=1500ms seed=7
workload producers=3 consumers=2 duration=9s
check
`))
	require.NoError(t, err)
	res := Run(t, proccluster.Failpoint.Path(t), "nemesis", cmds)
	var report strings.Builder
	WriteReport(&report, "failpoint build", []Result{res})
	require.Equal(t, "PASS", Verdict(res), "%s", report.String())
	work := res.Steps[2].Output
	require.Regexp(t, `: [1-9]\d* acknowledged`, work, "the producers got writes through")
	require.Regexp(t, `nemesis: (kill|power-loss|partition|pause) n\d`, work, "the nemesis injected faults")
	require.Regexp(t, `2 consumers read [1-9]\d* records`, work, "the consumers read")
	require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
}

// The campaign can fail: with the ack-before-fsync canary (appends
// reported durable before their fsync), cutting the power of a node whose
// fsyncs stall loses entries it had reported durable, and the restart says
// so. A cut can still find nothing unsynced when the machine is busy (CI
// runs packages in parallel): up to three runs, one must catch it.
func TestNemesisCampaignCatchesAckBeforeFsync(t *testing.T) {
	t.Setenv("VDL_CANARY", "ack-before-fsync") // the servers inherit it
	var verdicts []string
	for seed := 2; seed <= 4; seed++ {
		cmds, err := Parse(strings.NewReader(fmt.Sprintf(`start-cluster nodes=3 streams=1
nemesis faults=power-loss interval=1500ms seed=%d
workload producers=3 duration=6s
`, seed)))
		require.NoError(t, err)
		res := Run(t, proccluster.Failpoint.Path(t), "canary", cmds)
		verdicts = append(verdicts, Verdict(res))
		if Verdict(res) == "FAIL" {
			require.ErrorContains(t, res.Steps[2].Err, "lost what it had reported durable")
			return
		}
	}
	t.Fatalf("the canary was never caught: verdicts %v", verdicts)
}

// The failpoint-driven faults of the nemesis: a slow disk (every fsync of
// a node 100 ms longer until the next turn) and leadership transfers
// (the leader hands the stream to a follower through the admin API), while
// producers and consumers run; nothing acknowledged is lost.
func TestSlowDiskAndLeaderTransfers(t *testing.T) {
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=slow-disk,leader-transfer interval=700ms seed=3
workload producers=2 consumers=1 duration=5s
check
`))
	require.NoError(t, err)
	res := RunWith(t, proccluster.Failpoint.Path(t), "slow", cmds, Options{ReportDir: t.TempDir()})
	var report strings.Builder
	WriteReport(&report, "failpoint build", []Result{res})
	require.Equal(t, "PASS", Verdict(res), "%s", report.String())
	require.Positive(t, res.Summary.FaultCounts["slow-disk"], "%s", res.Steps[2].Output)
	require.Positive(t, res.Summary.FaultCounts["leader-transfer"], "%s", res.Steps[2].Output)
	require.Regexp(t, `leader-transfer n\d`, res.Steps[2].Output)
	require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
}

// The failpoint build's crashes on the write path (a server killing
// itself before or after a write, a sync, a save, an apply, or between
// committing a write and answering it), torn writes (half a chunk written,
// then the crash) and a failed fsync (EIO: the server must stop taking
// writes, /health 503, until restarted): each server restarts on its data
// and nothing acknowledged is lost.
func TestCrashNemesis(t *testing.T) {
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=crash,torn-write,disk-error interval=1500ms seed=5
workload producers=3 consumers=1 duration=8s
check converge=1
`))
	require.NoError(t, err)
	res := RunWith(t, proccluster.Failpoint.Path(t), "crash", cmds, Options{ReportDir: t.TempDir()})
	var report strings.Builder
	WriteReport(&report, "failpoint build", []Result{res})
	require.Equal(t, "PASS", Verdict(res), "%s", report.String())
	for _, k := range []string{"crash", "torn-write", "disk-error"} {
		require.Positive(t, res.Summary.FaultCounts[k], "%s: %s", k, res.Steps[2].Output)
	}
	require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
	require.Contains(t, res.Steps[3].Output, "byte-identical")
}

// A membership change under load: a follower loses its disk and is
// replaced (wiped, removed from every stream, added back as a learner,
// promoted once caught up); nothing acknowledged is lost and the replaced
// server's log ends byte-identical to the others'.
func TestReplaceNemesis(t *testing.T) {
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=replace interval=2500ms seed=1
workload producers=2 consumers=1 duration=6s
check converge=1
`))
	require.NoError(t, err)
	res := RunWith(t, proccluster.Production.Path(t), "replace", cmds, Options{ReportDir: t.TempDir()})
	var report strings.Builder
	WriteReport(&report, "production build", []Result{res})
	require.Equal(t, "PASS", Verdict(res), "%s", report.String())
	require.Positive(t, res.Summary.FaultCounts["replace"], "%s", res.Steps[2].Output)
	require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
	require.Contains(t, res.Steps[3].Output, "3 replicas' logs compared")
	require.Contains(t, res.Steps[3].Output, "byte-identical")
}
