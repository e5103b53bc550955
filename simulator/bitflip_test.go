package simulator

import (
	"github.com/vdl-project/vdl/internal/canary"

	"testing"
)

// flipSeeds is the bit-flip batch (~40 s on a shared 2-core machine).
const flipSeeds = 300

// TestBitFlips runs a batch with the opt-in corruption faults: every seed
// must pass (corruption detected, never served; the nodes that detect it
// stop for good; the rest stays safe and live), and corruption must
// actually have been injected and detected, both at open and on reads.
func TestBitFlips(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("replaying one seed")
	}
	n := flipSeeds
	if testing.Short() {
		n = 20
	}
	b := runBatch(t, 1, n, 0, func(cfg *Config) { cfg.BitFlips = true }, func(r *Result) bool {
		if !r.OK {
			report(t, r)
			cfg := baseConfig(r.Seed)
			cfg.BitFlips = true
			t.Errorf("seed %d FAILED: %s\n    replay: %s", r.Seed, r.Failures[0], replayCmd(cfg))
		}
		return true
	})
	t.Log(b.summary())
	if b.faults["bitflip"] == 0 || b.faults["misdirect"] == 0 {
		t.Errorf("no corruption injected: %v", b.faults)
	}
	if b.detected < b.seeds/4 {
		t.Errorf("corruption detected in only %d of %d seeds: %v", b.detected, b.seeds, b.detections)
	}
	if b.detections["open"] == 0 {
		t.Errorf("no corruption detected at open: %v", b.detections)
	}
	if reads := b.detections["read"] + b.detections["panic"] + b.detections["final-read"] + b.detections["snapshot-source"]; reads == 0 && !testing.Short() {
		t.Errorf("no corruption detected on a read: %v", b.detections)
	}
}

// TestCanaryServeCorrupt: a corrupted node that served what a store
// without read checksums would (a flipped bit in a record value) is caught.
func TestCanaryServeCorrupt(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("replaying one seed")
	}
	var caught *Result
	b := runBatch(t, 1, flipSeeds, 0, func(cfg *Config) {
		cfg.BitFlips = true
		cfg.Canary = canary.ServeCorrupt
	}, func(r *Result) bool {
		if !r.OK {
			caught = r
			return false
		}
		return true
	})
	if caught == nil {
		t.Fatalf("canary %s not caught in %d seeds", canary.ServeCorrupt, b.seeds)
	}
	t.Logf("canary %s caught at seed %d (%d seeds run): %s", canary.ServeCorrupt, caught.Seed, b.seeds, caught.Failures[0])
}
