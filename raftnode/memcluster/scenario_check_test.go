package memcluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode/clustertest"
)

// check: for every group, whether each up node holds every acknowledged
// write at the offset it was acknowledged at (or is behind, or retention
// deleted it), and whether the replicas agree on every offset they share.
func (s *scenario) check(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	for _, g := range s.c.cfg.Groups {
		fmt.Fprintf(&b, "g%d: %d acknowledged writes\n", g, s.countAcked(g))
		seen := map[int64]string{} // offset -> value, as the nodes read so far hold it
		agree := true
		for _, n := range s.c.nodes {
			if n.Down {
				fmt.Fprintf(&b, "  n%d down\n", n.ID)
				continue
			}
			recs := readRecords(t, n, g)
			for off, v := range recs {
				if w, ok := seen[off]; ok && w != v {
					agree = false
				}
				seen[off] = v
			}
			fmt.Fprintf(&b, "  n%d %s\n", n.ID, s.checkNode(n, g, recs))
		}
		if agree {
			b.WriteString("  replicas agree\n")
		} else {
			b.WriteString("  REPLICAS DIFFER\n")
		}
	}
	return b.String()
}

func (s *scenario) countAcked(g uint64) int {
	k := 0
	for _, w := range s.acked {
		if w.group == g {
			k++
		}
	}
	return k
}

// checkNode compares a node's records with the acknowledged writes.
func (s *scenario) checkNode(n *Node, g uint64, recs map[int64]string) string {
	start, hwm := n.Logs[g].StartOffset(), n.hwm[g]
	held, behind, deleted, lost := 0, 0, 0, 0
	for _, w := range s.acked {
		switch {
		case w.group != g:
		case w.res.NextOffset > hwm:
			behind++
		case w.res.BaseOffset < start:
			deleted++
		case recs[w.res.BaseOffset] == w.value:
			held++
		default:
			lost++
		}
	}
	out := fmt.Sprintf("offsets [%d,%d): %d held", start, hwm, held)
	if deleted > 0 {
		out += fmt.Sprintf(", %d deleted by retention", deleted)
	}
	if behind > 0 {
		out += fmt.Sprintf(", %d beyond its high watermark", behind)
	}
	if lost > 0 {
		out += fmt.Sprintf(", %d LOST", lost)
	}
	return out
}

// readRecords reads a node's committed records of a group, by offset.
func readRecords(t *testing.T, n *Node, g uint64) map[int64]string {
	l := n.Logs[g]
	out := map[int64]string{}
	if l.StartOffset() >= n.hwm[g] {
		return out
	}
	bs, err := l.Read(l.StartOffset(), n.hwm[g], 1<<30)
	require.NoError(t, err)
	var all []byte
	for _, b := range bs {
		all = append(all, b.Data...)
	}
	kbs, err := clustertest.SplitBatches(all)
	require.NoError(t, err)
	for _, kb := range kbs {
		vs, err := kb.Values()
		require.NoError(t, err)
		for i, v := range vs {
			out[kb.Base+int64(i)] = string(v)
		}
	}
	return out
}
