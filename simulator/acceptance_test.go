package simulator

import (
	"slices"

	"github.com/stretchr/testify/require"
	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/canary"

	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDeterminism runs sampled seeds twice and compares trace hashes (the
// trace includes every core effect, so any divergence shows).
func TestDeterminism(t *testing.T) {
	seeds := []uint64{1, 7, 42, 1001, 31337}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		cfg := Config{Seed: seed, TraceEffects: true}
		a := runSeed(t, cfg)
		b := runSeed(t, cfg)
		if a.TraceHash != b.TraceHash || a.Events != b.Events || a.Ops != b.Ops {
			t.Errorf("seed %d diverged: %s/%d events/%d ops vs %s/%d events/%d ops", seed, a.TraceHash, a.Events, a.Ops, b.TraceHash, b.Events, b.Ops)
		}
		// A different seed must give a different run.
		c := runSeed(t, Config{Seed: seed + 1, TraceEffects: true})
		if c.TraceHash == a.TraceHash {
			t.Errorf("seeds %d and %d have the same trace", seed, seed+1)
		}
	}
}

// TestRegressionSeeds replays the seeds kept in testcases/sim-seeds.txt:
// lines "seed [nodes=N] [dcs=N] [safety=D]  # why".
func TestRegressionSeeds(t *testing.T) {
	f, err := os.Open("../testcases/sim-seeds.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		seed, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", sc.Text())
		}
		cfg := Config{Seed: seed}
		for _, kv := range fields[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "nodes":
				cfg.Nodes, _ = strconv.Atoi(v)
			case "dcs":
				cfg.DCs, _ = strconv.Atoi(v)
			case "safety":
				cfg.Safety, _ = time.ParseDuration(v)
			case "controlplane":
				cfg.ControlPlane = true
			default:
				t.Fatalf("bad option %q", kv)
			}
		}
		r := runSeed(t, cfg)
		if !r.OK {
			report(t, r)
			t.Errorf("regression seed %d failed: %s", seed, r.Failures[0])
		}
	}
}

// simCanaries are the canaries the CI batch must catch, each with the
// checks that target it: the first seed that fails must have failed one
// of them (serve-corrupt needs BitFlips: TestCanaryServeCorrupt). minRate,
// when set, is the share of the first rateSeeds seeds that must catch it.
var simCanaries = []struct {
	name    canary.Name
	by      []check
	minRate float64
}{
	{name: canary.AckBeforeFsync, by: []check{checkDurability}},
	{name: canary.AckBeforeCommit, by: []check{checkLinearizable, "anomaly:lost"}},
	{name: canary.ReadAboveHWM, by: []check{checkLinearizable}},
	{name: canary.ReorderResponses, by: []check{"ordering:" + check(checker.ResponseOrder)}},
	{name: canary.SkipPoison, by: []check{"ordering:" + check(checker.OKAfterFailure)}},
	{name: canary.RetainAboveCommit, by: []check{checkRetention}},
	{name: canary.HardStateNotSynced, by: []check{checkDurability}},
	{name: canary.ConfStateNotReplayed, by: []check{checkDurability}},
	{name: canary.FollowerServesFetch, by: []check{checkLinearizable}},
	{name: canary.NoReadFence, by: []check{checkLinearizable}, minRate: 0.10},
	{name: canary.DedupOff, by: []check{"anomaly:" + check(checker.Duplicate), checkLinearizable}, minRate: 0.50},
	{name: canary.Livelock, by: []check{checkWatchdog}},
	{name: canary.QueueAnyDir, by: []check{checkPanic}},
}

// rateSeeds is the sample for a canary's catch rate.
const rateSeeds = 100

// TestCanaries proves the checks can fail: each deliberately broken variant
// runs over the CI batch's seeds (from its first one) and must be caught
// before the batch ends, by a check that targets it.
func TestCanaries(t *testing.T) {
	if !canary.Enabled {
		t.Skip("canaries need a vdlcanary build: make test-canaries")
	}
	limit := ciSeeds
	if testing.Short() {
		limit = 60
	}
	for _, c := range simCanaries {
		t.Run(string(c.name), func(t *testing.T) {
			var caught *Result
			b := runBatch(t, 1, limit, 0, func(cfg *Config) { cfg.Canary = c.name }, func(r *Result) bool {
				if !r.OK {
					caught = r
					return false
				}
				return true
			})
			if caught == nil {
				t.Fatalf("canary %s not caught in %d seeds", c.name, b.seeds)
			}
			t.Logf("canary %s caught at seed %d (%d seeds run) by %v: %s", c.name, caught.Seed, b.seeds, caught.Caught, caught.Failures[0])
			if c.name == canary.Livelock {
				require.Contains(t, caught.Failures[len(caught.Failures)-1], "replay: make sim SEED=", "a hung seed says how to replay it")
			}
			if !slices.ContainsFunc(caught.Caught, func(k check) bool { return slices.Contains(c.by, k) }) {
				t.Errorf("canary %s was caught at seed %d by %v, not by the checks that target it (%v): replay with make sim SEED=%d CANARY=%s",
					c.name, caught.Seed, caught.Caught, c.by, caught.Seed, c.name)
			}
			if c.minRate == 0 || testing.Short() {
				return
			}
			hits := 0
			runBatch(t, 1, rateSeeds, 0, func(cfg *Config) { cfg.Canary = c.name }, func(r *Result) bool {
				if slices.ContainsFunc(r.Caught, func(k check) bool { return slices.Contains(c.by, k) }) {
					hits++
				}
				return true
			})
			t.Logf("canary %s caught in %d of %d seeds", c.name, hits, rateSeeds)
			if rate := float64(hits) / rateSeeds; rate < c.minRate {
				t.Errorf("canary %s caught in %.0f%% of seeds, want at least %.0f%%", c.name, 100*rate, 100*c.minRate)
			}
		})
	}
}

// TestWatchdogWallClock: a seed that runs past its wall-clock limit fails
// (with its replay line) instead of hanging the batch. The flush-round and
// event limits are proven by the livelock canary (TestCanaries).
func TestWatchdogWallClock(t *testing.T) {
	r := runSeed(t, Config{Seed: 1, WallLimit: time.Millisecond})
	require.False(t, r.OK)
	require.Contains(t, r.Caught, checkWatchdog)
	require.Contains(t, r.Failures[len(r.Failures)-1], "wall-clock limit")
	require.Contains(t, r.Failures[len(r.Failures)-1], "replay: make sim SEED=1")
	require.Less(t, r.Wall, 10*time.Second)
}
