package simulator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/storage"
)

// A check is one thing a run asserts. Every failure names the check that
// found it (Result.Caught), so a canary is held to the check it targets,
// not to whatever happens to go wrong after it.
type check string

const (
	checkHarness      check = "harness"      // the simulator itself could not do what it meant to
	checkProtocol     check = "protocol"     // an undecodable or unexpected Kafka response
	checkPanic        check = "panic"        // a process panicked
	checkRestart      check = "restart"      // a process could not restart on its disk
	checkDurability   check = "durability"   // a restart lost what raft was told is durable
	checkRetention    check = "retention"    // retention above the high watermark, or past it
	checkHWM          check = "hwm"          // a high watermark went back within a term
	checkLiveness     check = "liveness"     // no progress or no convergence after the heal
	checkFinalRead    check = "final-read"   // the final read did not complete
	checkReplicaRead  check = "replica-read" // a replica's committed records could not be read
	checkCorruption   check = "corruption"   // corruption reported where none was injected
	checkWatchdog     check = "watchdog"     // a seed ran past its wall-clock or event limits
	checkLinearizable check = "linearizability"
	checkConvergence  check = "convergence"
	checkHistory      check = "history" // the recorded history is malformed
	// checkControlPlane: a create not exactly once, a group founded
	// twice, or the control plane unsettled after the heal (moves,
	// assignments, deleted data, leaders outside their preferred DC).
	checkControlPlane check = "control-plane"
	// The checker's anomalies and ordering violations are "anomaly:<kind>"
	// and "ordering:<kind>".
)

// checkerCheck names the check behind one of the checker's stream failures.
func checkerCheck(sr *checker.StreamResult, failure string) check {
	switch {
	case strings.HasPrefix(failure, "not linearizable"), strings.HasPrefix(failure, "porcupine"):
		return checkLinearizable
	case strings.HasPrefix(failure, "replicas diverge"):
		return checkConvergence
	case strings.Contains(failure, "same-connection ordering"):
		return "ordering"
	}
	for k := range sr.Anomalies {
		if strings.HasSuffix(failure, " "+string(k)) {
			return check("anomaly:" + string(k))
		}
	}
	return "checker"
}

// retained checks the outcome of a retention request made at high
// watermark hwm.
func (s *Sim) retained(l *node, g uint64, before, hwm int64, err error) {
	s.w.record("n%d retention of g%d before %d: %v", l.id, g, before, err)
	switch refused := errors.Is(err, kafka.ErrRetainAboveHWM); {
	case before > hwm && err == nil:
		s.fail(checkRetention, "n%d accepted a retention before %d, above its high watermark %d", l.id, before, hwm)
	case before <= hwm && refused:
		s.fail(checkRetention, "n%d refused a retention before %d, at or below its high watermark %d: %v", l.id, before, hwm, err)
	}
}

// checkLogStart: a readable leader's log never starts above its high watermark
// (retention deletes only committed records).
func (n *node) checkLogStart() {
	for _, g := range n.s.groups {
		v, l := n.grp[g], n.logs[g]
		if v == nil || l == nil || !v.Readable(n.id) {
			continue // the view's high watermark is current only on a readable leader
		}
		if start := l.StartOffset(); start > v.HighWatermark {
			n.s.fail(checkRetention, "n%d g%d: the log starts at %d, above the high watermark %d", n.id, g, start, v.HighWatermark)
		}
	}
}

// survivesLoss reports whether every group keeps a quorum of voters
// without n (an operator replaces a disk only then: without one, the group
// is unavailable until the lost server's data comes back) — in the
// membership every running replica applied, not only the leader's: a
// replica that has not applied a promotion yet can be the only one left
// to campaign, and it counts votes in the membership it knows (seed 1959:
// the leader's disk was wiped while the other voter had the promotion of
// the third in its log, not applied, and no one could be elected again).
// n's own view counts too: as leader it may be the only running replica
// that applied a demotion (seed 9376: n3 led g2 with voters [2 3] after
// demoting n1, the other voter was down, n1 had not applied it, and the
// wipe of n3 left g2 one voter of two).
func (s *Sim) survivesLoss(n *node) bool {
	for _, g := range s.groups {
		if s.leader(g) == nil {
			return false
		}
		// A voter the nemesis is demoting may be a learner any moment.
		demoted, ok := s.demoted[g]
		for _, m := range s.nodes {
			if m.down {
				continue
			}
			st, hosted := m.rn.Status(g)
			if !hosted || !slices.Contains(append(st.Voters, st.Learners...), m.id) {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(st.Voters), func(id uint64) bool { return id == n.id || (ok && id == demoted) })
			if len(rest) < len(st.Voters)/2+1 {
				return false
			}
		}
	}
	return true
}

// divergence describes why the cluster has not converged ("" when it has):
// every group has a readable leader with no learners, and every node
// applied up to the same high watermark.
func (s *Sim) divergence() string {
	if r := s.replacementState(); r != "" {
		return r
	}
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil || !l.readable(g) {
			return fmt.Sprintf("group %d has no readable leader", g)
		}
		st, _ := l.rn.Status(g)
		if len(st.Learners) > 0 {
			return fmt.Sprintf("group %d still has learners %v", g, st.Learners)
		}
		for _, n := range s.nodes {
			if n.quarantined {
				continue // detected corruption: stopped for good
			}
			if n.down {
				return fmt.Sprintf("n%d is down", n.id)
			}
			if !slices.Contains(st.Voters, n.id) {
				continue // not a replica (control plane: streams on some servers)
			}
			if n.grp[g] == nil {
				return fmt.Sprintf("group %d: voter n%d does not host it", g, n.id)
			}
			if n.grp[g].HighWatermark != l.grp[g].HighWatermark {
				return fmt.Sprintf("group %d: n%d hwm %d, leader n%d hwm %d", g, n.id, n.grp[g].HighWatermark, l.id, l.grp[g].HighWatermark)
			}
		}
	}
	return ""
}

// replicas reads every replica's committed records for the convergence check.
func (s *Sim) replicas() map[string]map[string][]checker.ReplicaRecord {
	out := map[string]map[string][]checker.ReplicaRecord{}
	for i, st := range s.streams {
		g := s.groups[i]
		out[st] = map[string][]checker.ReplicaRecord{}
		var voters []uint64
		if l := s.leader(g); l != nil {
			gs, _ := l.rn.Status(g)
			voters = gs.Voters
		}
		for _, n := range s.nodes {
			if n.down || n.logs[g] == nil || voters != nil && !slices.Contains(voters, n.id) {
				continue // down, or not a replica of g (control plane)
			}
			l := n.logs[g]
			var recs []checker.ReplicaRecord
			off, hwm := l.StartOffset(), n.grp[g].HighWatermark
			for off < hwm {
				bs, err := l.Read(off, hwm, math.MaxInt32)
				if err != nil && errors.Is(err, storage.ErrCorrupt) && n.corrupted {
					s.detections["final-read"]++
					s.w.record("CORRUPTION DETECTED n%d (final-read): %v", n.id, err)
					recs = nil
					break
				}
				if err != nil || len(bs) == 0 {
					s.fail(checkReplicaRead, "n%d %s: read [%d,%d): %v", n.id, st, off, hwm, err)
					break
				}
				for _, b := range bs {
					for _, r := range decodeRecords(b.Data) {
						if r.Offset >= off && r.Offset < hwm {
							recs = append(recs, checker.ReplicaRecord{Offset: r.Offset, Bytes: []byte(r.Value)})
						}
					}
				}
				off = bs[len(bs)-1].NextOffset
			}
			out[st][fmt.Sprintf("n%d", n.id)] = recs
		}
	}
	return out
}
