package simulator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// check: waits (up to 20 simulated seconds) for the up nodes to agree on
// every stream's end offset, then reads every replica and reports, per
// stream, the acknowledged records, each node's end offset and whether it
// holds every acknowledged record at its offset, and whether the replicas
// agree. Simulator failures (panics, durability checks) print too.
func (sc *scenario) check(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	if !sc.runFor(20*time.Second, func() bool { return sc.unconverged() == "" }) {
		fmt.Fprintf(&b, "not converged: %s\n", sc.unconverged())
	}
	replicas := sc.s.replicas()
	for _, st := range sc.s.streams {
		acked := sc.ackedOn(st)
		fmt.Fprintf(&b, "%s: %d acknowledged\n", st, len(acked))
		byOffset := map[int64]string{}
		agree := true
		for _, n := range sc.s.nodes {
			if n.down {
				fmt.Fprintf(&b, "  n%d down\n", n.id)
				continue
			}
			held := map[int64]string{}
			for _, r := range replicas[st][fmt.Sprintf("n%d", n.id)] {
				held[r.Offset] = string(r.Bytes)
				if v, ok := byOffset[r.Offset]; ok && v != string(r.Bytes) {
					agree = false
				}
				byOffset[r.Offset] = string(r.Bytes)
			}
			g := sc.s.groups[slices.Index(sc.s.streams, st)]
			fmt.Fprintf(&b, "  n%d end offset %d: %s\n", n.id, n.grp[g].HighWatermark, holds(acked, held))
		}
		if agree {
			b.WriteString("  replicas agree\n")
		} else {
			b.WriteString("  REPLICAS DIFFER\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (sc *scenario) ackedOn(stream string) []scenarioWrite {
	var out []scenarioWrite
	for _, w := range sc.acked {
		if w.stream == stream {
			out = append(out, w)
		}
	}
	return out
}

// holds says whether a replica's records include every acknowledged one.
func holds(acked []scenarioWrite, held map[int64]string) string {
	missing := 0
	for _, w := range acked {
		if held[w.offset] != w.value {
			missing++
		}
	}
	if missing == 0 {
		return fmt.Sprintf("holds all %d", len(acked))
	}
	return fmt.Sprintf("MISSING %d of %d", missing, len(acked))
}

// unconverged says why the up nodes do not agree yet ("" when they do):
// each stream has a leader and every up node applied up to its end offset.
func (sc *scenario) unconverged() string {
	for i, st := range sc.s.streams {
		g := sc.s.groups[i]
		l := sc.s.leader(g)
		if l == nil {
			return fmt.Sprintf("%s has no leader", st)
		}
		for _, n := range sc.s.nodes {
			if !n.down && n.grp[g].HighWatermark != l.grp[g].HighWatermark {
				return fmt.Sprintf("%s: n%d end offset %d, leader n%d %d", st, n.id, n.grp[g].HighWatermark, l.id, l.grp[g].HighWatermark)
			}
		}
	}
	return ""
}
