package simulator

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// ciSeeds is the CI batch: sized to about 5 minutes on a 2-core machine (≈500 seeds/min on one core).
const ciSeeds = 1800

// shortSeeds is the batch under -short.
const shortSeeds = 12

// batch accumulates the figures of a batch of seeds.
type batch struct {
	seeds, failed, ops int
	sim, wall          time.Duration
	faults             map[string]int
	detections         map[string]int
	detected           int // seeds with a corruption detected
	start              time.Time
}

func (b *batch) add(r *Result) {
	b.seeds++
	if !r.OK {
		b.failed++
	}
	b.ops += r.Ops
	b.sim += r.SimTime
	b.wall += r.Wall
	for k, v := range r.Faults {
		b.faults[k] += v
	}
	for k, v := range r.Detections {
		b.detections[k] += v
	}
	if len(r.Detections) > 0 {
		b.detected++
	}
}

func (b *batch) summary() string {
	var sb strings.Builder
	el := time.Since(b.start)
	fmt.Fprintf(&sb, "%d seeds, %d failed, %d ops checked, %v simulated in %v: %.1f simulated s per wall s, %.1f seeds per minute\n",
		b.seeds, b.failed, b.ops, b.sim.Round(time.Second), el.Round(time.Second), b.sim.Seconds()/el.Seconds(), float64(b.seeds)/el.Minutes())
	keys := make([]string, 0, len(b.faults))
	for k := range b.faults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sb.WriteString("faults injected:")
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s=%d", k, b.faults[k])
	}
	if len(b.detections) > 0 {
		fmt.Fprintf(&sb, "\ncorruption detected in %d seeds:", b.detected)
		for _, k := range sortedKeys(b.detections) {
			fmt.Fprintf(&sb, " %s=%d", k, b.detections[k])
		}
	}
	return sb.String()
}

// runBatch runs seeds from start until count seeds ran or budget passed
// (whichever is set), calling each for every result; it stops early when
// each returns false.
func runBatch(t *testing.T, start uint64, count int, budget time.Duration, mod func(*Config), each func(*Result) bool) *batch {
	b := &batch{faults: map[string]int{}, detections: map[string]int{}, start: time.Now()}
	last := time.Now()
	for seed := start; ; seed++ {
		if count > 0 && b.seeds >= count {
			break
		}
		if budget > 0 && time.Since(b.start) >= budget {
			break
		}
		cfg := baseConfig(seed)
		if mod != nil {
			mod(&cfg)
		}
		r := runSeed(t, cfg)
		b.add(r)
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "sim: %d seeds (last %d), %d failed, %d ops, %.1f sim-s/s, %.1f seeds/min\n",
				b.seeds, seed, b.failed, b.ops, b.sim.Seconds()/time.Since(b.start).Seconds(), float64(b.seeds)/time.Since(b.start).Minutes())
		}
		if each != nil && !each(r) {
			break
		}
	}
	return b
}

// cpEveryTenth runs every tenth seed of the batch with the control plane
// (controlplane.go): such a seed costs about twice a plain one.
func cpEveryTenth(cfg *Config) {
	if cfg.Seed%10 == 0 {
		cfg.ControlPlane = true
	}
}

// TestSimBatch is the CI batch (and `make sim`): every seed must pass.
func TestSimBatch(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("replaying one seed")
	}
	count, budget := *flagSeeds, *flagBudget
	if count == 0 && budget == 0 {
		count = ciSeeds
		if testing.Short() {
			count = shortSeeds
		}
	}
	b := runBatch(t, *flagStart, count, budget, cpEveryTenth, func(r *Result) bool {
		if !r.OK {
			report(t, r)
			cfg := baseConfig(r.Seed)
			cpEveryTenth(&cfg)
			t.Errorf("seed %d FAILED: %s\n    replay: %s", r.Seed, r.Failures[0], replayCmd(cfg))
		}
		return true
	})
	t.Log(b.summary())
	fmt.Fprintln(os.Stderr, "sim: "+b.summary())
}

// TestSimManyStreams runs seeds with 60 streams on three servers (one
// client each): every fault of the batch, with a server's elections,
// votes and syncs counted in dozens of groups at once — the scale where
// campaign pacing, the adaptive campaign bound and the disk's cost per
// fsynced log (disk.go) act.
func TestSimManyStreams(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("replaying one seed")
	}
	for seed := uint64(1); seed <= 10; seed++ {
		cfg := Config{Seed: seed, Nodes: 3, Streams: 60, Clients: 1}
		if r := runSeed(t, cfg); !r.OK {
			report(t, r)
			t.Errorf("seed %d with 60 streams FAILED: %s", seed, r.Failures[0])
		}
	}
}
