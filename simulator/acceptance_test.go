package simulator

import (
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

// simCanaries are the canaries the plain batch must catch (serve-corrupt
// needs BitFlips: TestCanaryServeCorrupt).
var simCanaries = []canary.Name{canary.AckBeforeFsync, canary.AckBeforeCommit, canary.ReadAboveHWM,
	canary.ReorderResponses, canary.FollowerServesFetch}

// TestCanaries proves the checks can fail: each deliberately broken variant
// runs over the CI batch's seeds (from its first one) and must be caught
// before the batch ends.
func TestCanaries(t *testing.T) {
	if !canary.Enabled {
		t.Skip("canaries need a vdlcanary build: go test -tags vdlcanary -run TestCanaries ./simulator")
	}
	limit := ciSeeds
	if testing.Short() {
		limit = 60
	}
	for _, c := range simCanaries {
		t.Run(string(c), func(t *testing.T) {
			var caught *Result
			b := runBatch(t, 1, limit, 0, func(cfg *Config) { cfg.Canary = c }, func(r *Result) bool {
				if !r.OK {
					caught = r
					return false
				}
				return true
			})
			if caught == nil {
				t.Fatalf("canary %s not caught in %d seeds", c, b.seeds)
			}
			t.Logf("canary %s caught at seed %d (%d seeds run): %s", c, caught.Seed, b.seeds, caught.Failures[0])
		})
	}
}
