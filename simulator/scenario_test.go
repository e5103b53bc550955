package simulator

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScenarioScripts replays every cluster scenario in testcases/*.txt
// (datadriven scripts: start-cluster, produce, kill, restart, partition,
// heal, run, check) on the simulator; `go test -rewrite` rewrites their
// expected output. The commands are cluster-level on purpose: the same
// files are meant to drive real processes too.
func TestScenarioScripts(t *testing.T) {
	paths, err := filepath.Glob("../testcases/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if filepath.Base(path) == "sim-seeds.txt" {
			continue // the regression seeds: a list, not a script (TestRegressionSeeds)
		}
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			// etcd raft draws election timeouts from crypto/rand.
			cryptotest.SetGlobalRandom(t, 1)
			sc := &scenario{}
			datadriven.RunTest(t, path, sc.handle)
		})
	}
}

type handler func(sc *scenario, t *testing.T, d *datadriven.TestData) string

var scenarioHandlers map[string]handler

func init() {
	scenarioHandlers = map[string]handler{
		"start-cluster": (*scenario).startCluster,
		"produce":       (*scenario).produce,
		"kill":          (*scenario).kill,
		"power-loss":    (*scenario).powerLoss,
		"restart":       (*scenario).restartNode,
		"partition":     (*scenario).partition,
		"heal":          (*scenario).heal,
		"run":           (*scenario).run,
		"check":         (*scenario).check,
		"status":        (*scenario).status,
	}
}

func (sc *scenario) handle(t *testing.T, d *datadriven.TestData) string {
	h, ok := scenarioHandlers[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if sc.s == nil && d.Cmd != "start-cluster" {
		d.Fatalf(t, "%s before start-cluster", d.Cmd)
	}
	out := h(sc, t, d)
	if len(sc.s.failures) > sc.reported {
		// A check inside the simulator failed (a panic, a durability
		// check at restart): show it where it happened.
		for _, f := range sc.s.failures[sc.reported:] {
			out += "\nFAILURE: " + f
		}
		sc.reported = len(sc.s.failures)
	}
	return out
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

// bare returns the i-th argument without a value ("kill 2": "2").
func bare(t *testing.T, d *datadriven.TestData, i int) string {
	var args []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			args = append(args, a.Key)
		}
	}
	if i >= len(args) {
		d.Fatalf(t, "%s needs %d bare arguments", d.Cmd, i+1)
	}
	return args[i]
}

// durationAt parses the i-th bare argument as a simulated duration.
func durationAt(t *testing.T, d *datadriven.TestData, i int) time.Duration {
	dur, err := time.ParseDuration(bare(t, d, i))
	if err != nil {
		d.Fatalf(t, "%s: %v", d.Cmd, err)
	}
	return dur
}

// nodeSet parses "1,2" into node ids.
func nodeSet(t *testing.T, d *datadriven.TestData, s string) []uint64 {
	var ids []uint64
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			d.Fatalf(t, "node list %q: %v", s, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func streamArg(t *testing.T, d *datadriven.TestData) string {
	st := "s1"
	if d.HasArg("stream") {
		d.ScanArgs(t, "stream", &st)
	}
	return st
}

func nodeNames(ids []uint64) string {
	var b []string
	for _, id := range ids {
		b = append(b, fmt.Sprintf("n%d", id))
	}
	return strings.Join(b, ",")
}
