package simulator

import (
	"github.com/vdl-project/vdl/internal/canary"

	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"
)

var (
	flagSeed    = flag.Uint64("sim.seed", 0, "replay this one seed with a readable trace (TestSim)")
	flagStart   = flag.Uint64("sim.start", 1, "first seed of a batch")
	flagSeeds   = flag.Int("sim.seeds", 0, "seeds in a batch (0: run for -sim.budget)")
	flagBudget  = flag.Duration("sim.budget", 0, "wall-clock budget of a batch (default 4m30s, 20s under -short)")
	flagNodes   = flag.Int("sim.nodes", 0, "servers: 3 or 5 (0: drawn from the seed)")
	flagDCs     = flag.Int("sim.dcs", 0, "datacenters: 1-3 (0: drawn from the seed)")
	flagSafety  = flag.Duration("sim.safety", 0, "simulated length of the safety phase (default 12s)")
	flagCanary  = flag.String("sim.canary", "", "run a deliberately broken variant: "+canaryNames())
	flagEffects = flag.Bool("sim.effects", false, "trace every core effect too")
	flagNoQuiet = flag.Bool("sim.noquiesce", false, "run without idle-group quiescence (as [raft] quiesce = false)")
	flagOut     = flag.String("sim.out", "", "directory for the checker's report of a failing seed")
	flagFlips   = flag.Bool("sim.bitflips", false, "inject bit flips and misdirected writes on a minority of nodes")
	flagCP      = flag.Bool("sim.controlplane", false, "run simulated config servers: streams created, deleted and moved during the run, the preferred-DC balancer")
)

func canaryNames() string {
	var s []string
	for _, c := range canary.All {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ") + " (a vdlcanary build: make sim SEED=n CANARY=name)"
}

// runSeed runs one seed with crypto/rand (etcd raft's election jitter) made
// deterministic for it.
func runSeed(t *testing.T, cfg Config) *Result {
	var res *Result
	t.Run(fmt.Sprintf("seed=%d", cfg.Seed), func(t *testing.T) {
		cryptotest.SetGlobalRandom(t, cfg.Seed)
		res = Run(cfg)
	})
	return res
}

func baseConfig(seed uint64) Config {
	return Config{Seed: seed, Nodes: *flagNodes, DCs: *flagDCs, Safety: *flagSafety, Canary: canary.Name(*flagCanary), BitFlips: *flagFlips, NoQuiesce: *flagNoQuiet, ControlPlane: *flagCP}
}

// TestSim replays one seed (-sim.seed) with a readable trace.
func TestSim(t *testing.T) {
	if *flagSeed == 0 {
		t.Skip("set -sim.seed (make sim SEED=n)")
	}
	cfg := baseConfig(*flagSeed)
	cfg.Trace = func(s string) { fmt.Println(s) }
	cfg.TraceEffects = *flagEffects
	cfg.OutDir = *flagOut
	if cfg.OutDir == "" {
		cfg.OutDir = filepath.Join(os.TempDir(), fmt.Sprintf("vdlsim-%d", cfg.Seed))
	}
	res := runSeed(t, cfg)
	report(t, res)
	if !res.OK {
		t.Fatalf("seed %d failed; checker report in %s", res.Seed, cfg.OutDir)
	}
}

func replayCmd(cfg Config) string {
	var args []string
	if *flagNodes != 0 {
		args = append(args, fmt.Sprintf("-sim.nodes=%d", *flagNodes))
	}
	if *flagDCs != 0 {
		args = append(args, fmt.Sprintf("-sim.dcs=%d", *flagDCs))
	}
	if cfg.Safety != 0 {
		args = append(args, fmt.Sprintf("-sim.safety=%v", cfg.Safety))
	}
	if cfg.BitFlips {
		args = append(args, "-sim.bitflips")
	}
	if cfg.ControlPlane {
		args = append(args, "-sim.controlplane")
	}
	cmd := fmt.Sprintf("make sim SEED=%d", cfg.Seed)
	if cfg.Canary != "" {
		cmd += " CANARY=" + string(cfg.Canary)
	}
	if len(args) > 0 {
		cmd += fmt.Sprintf(" SIMARGS='%s'", strings.Join(args, " "))
	}
	return cmd
}

func report(t *testing.T, r *Result) {
	t.Logf("seed %d: ok=%v %d nodes/%d DCs, %v simulated in %v (%.1fx), %d events, %d ops, trace %s",
		r.Seed, r.OK, r.Nodes, r.DCs, r.SimTime, r.Wall.Round(time.Millisecond), r.SimTime.Seconds()/r.Wall.Seconds(), r.Events, r.Ops, r.TraceHash[:16])
	t.Logf("faults: %v buggify: %v", r.Faults, r.Buggify)
	if len(r.Detections) > 0 {
		t.Logf("corruption detected: %v", r.Detections)
	}
	if r.ControlPlane != nil {
		t.Logf("control plane: %v", r.ControlPlane)
	}
	for _, f := range r.Failures {
		t.Logf("FAILURE: %s", f)
	}
}
