package simulator

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/server"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// simRetention is the second stream's retention policy (the first keeps
// everything, for the final complete read): records older than 4 s of
// simulated time, and beyond the newest 24 KiB, go.
var simRetention = storage.RetentionPolicy{MaxAge: 4000, MaxBytes: 24 << 10}

// retentionPolicies is the leader's periodic retention check, as the
// server's (server.RetentionDue): record timestamps are simulated ms.
func (s *Sim) retentionPolicies() {
	if s.liveness {
		return // the final read must see what the stream held at the heal
	}
	defer s.w.after(time.Second, nil, s.retentionPolicies)
	if len(s.groups) < 2 {
		return
	}
	g := s.groups[1]
	l := s.leader(g)
	if l == nil || !l.readable(g) {
		return
	}
	data, before, ok := server.RetentionDue(l.logs[g], simRetention, s.w.now/1e6, l.grp[g].HighWatermark)
	if !ok {
		return
	}
	s.w.faults["retention-policy"]++
	s.w.record("n%d retention policy of g%d: before %d", l.id, g, before)
	s.w.runIn(l, func() {
		l.propose(g, data, func(raftnode.Result, error) {})
		l.flush()
	})
}

func (s *Sim) changeMember(l *node, g, id uint64, t raftpb.ConfChangeType) {
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}}
	s.w.runIn(l, func() {
		l.proposeConfChange(g, cc, func(err error) {
			s.w.record("conf change g%d %v n%d: %v", g, t, id, err)
		})
	})
}

func (s *Sim) resume(n *node) {
	if !n.paused {
		return
	}
	n.paused = false
	held := n.held
	n.held = nil
	s.w.record("resume n%d (%d held events)", n.id, len(held))
	for _, e := range held {
		s.w.seq++
		e.at, e.seq = s.w.now, s.w.seq
		heap.Push(&s.w.q, e)
	}
}

// leader returns the up node that leads g with the highest term.
func (s *Sim) leader(g uint64) *node {
	var best *node
	var term uint64
	for _, n := range s.nodes {
		if n.down || n.paused {
			continue
		}
		if v := n.grp[g]; v != nil && v.Leader == n.id && v.Role == "StateLeader" && v.Term >= term {
			best, term = n, v.Term
		}
	}
	return best
}

// heal ends every fault: the liveness phase starts from a healthy cluster.
func (s *Sim) heal() {
	// Disk faults first: closing a window may restart a process.
	for _, n := range s.nodes {
		n.fs.SetFaults(vfs.Faults{})
		n.disk.SetCapacity(0)
		n.slowTill = 0
	}
	for _, w := range s.windows {
		s.closeWindow(w)
	}
	s.cut = map[[2]uint64]int{}
	s.clientCut = map[uint64]int{}
	s.clog = map[[2]uint64]time.Duration{}
	for _, n := range s.nodes {
		if n.paused {
			s.resume(n)
		}
		if n.down {
			s.restart(n)
		}
	}
	if s.cp != nil {
		s.cp.heal()
	}
	s.w.record("HEAL: liveness phase")
}

func (s *Sim) progressed() bool {
	for _, st := range s.streams {
		if !s.progress[st] {
			return false
		}
	}
	return true
}

func (s *Sim) busyClients() bool {
	for _, c := range s.clients {
		if c.conn != nil && len(c.conn.inflight) > 0 {
			return true
		}
	}
	return false
}

// repairMembership promotes learners back to voters during liveness.
func (s *Sim) repairMembership() {
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil || s.cp != nil && g >= cpFirstGroup {
			continue // the control plane's streams: their learners are its to promote or remove
		}
		st, _ := l.rn.Status(g)
		for _, id := range st.Learners {
			if r := s.replacing; r != nil && r.n.id == id {
				continue // the replacement promotes it once caught up
			}
			s.changeMember(l, g, id, raftpb.ConfChangeAddNode)
			break
		}
	}
	s.w.after(300*time.Millisecond, nil, s.repairMembership)
}

// safetyPhase runs the workload under the nemesis for Config.Safety.
func (s *Sim) safetyPhase() {
	w := s.w
	for i, st := range s.streams {
		for k := 0; k < s.cfg.Clients+s.cfg.Consumers; k++ {
			c := s.newClient(len(s.clients), st, false)
			c.consumer = k >= s.cfg.Clients
			// The last producing client of a stream is a plain producer;
			// the others are idempotent.
			c.idem = k < s.cfg.Clients-1 || s.cfg.Clients == 1
			c.pid = 7000 + int64(c.id)
			s.clients = append(s.clients, c)
			w.after(time.Duration(i*k)*time.Millisecond, nil, c.loop)
		}
	}
	w.after(300*time.Millisecond, nil, s.nemesis)
	w.after(0, nil, s.handshakes)
	w.after(time.Second, nil, s.retentionPolicies)
	if s.cp != nil {
		s.cp.start()
	}
	w.run(int64(s.cfg.Safety))
}

// livenessPhase heals every fault: the cluster must make progress and
// converge within Config.Liveness.
func (s *Sim) livenessPhase() {
	w := s.w
	s.liveness = true
	s.heal()
	s.healAt = w.now
	// A node stopped for good after detecting corruption leaves a smaller
	// quorum margin (slow personalities catch up much more slowly): the
	// bound doubles then. So it does with core.small-messages: a replica
	// left behind catches up by one or two entries per message (values
	// over MaxSizePerMsg) and two messages a round trip, about 30 entries
	// a second between two DCs — 23 s for the 760 entries a replica
	// paused and then cut off for 5 s missed in seed 5035.
	deadline := func() int64 {
		if s.w.bug.enabled("core.small-messages") ||
			slices.ContainsFunc(s.nodes, func(n *node) bool { return n.quarantined }) {
			return s.healAt + 2*int64(s.cfg.Liveness)
		}
		return s.healAt + int64(s.cfg.Liveness)
	}
	s.w.after(0, nil, s.repairMembership)
	for w.now < deadline() && !s.progressed() {
		w.run(w.now + int64(100*time.Millisecond))
	}
	if !s.progressed() {
		s.fail(checkLiveness, "liveness: no acknowledged produce on every stream within %v of healing (progress %v)", time.Duration(deadline()-s.healAt), s.progress)
	}
	s.workloadDone = true
	for _, c := range s.clients {
		c.stopped = true
	}
	for i := 0; i < 40 && s.busyClients(); i++ {
		w.run(w.now + int64(100*time.Millisecond))
	}
	for _, c := range s.clients {
		c.abandon("workload stopped")
	}
	for w.now < deadline() && s.divergence() != "" {
		w.run(w.now + int64(100*time.Millisecond))
	}
	if d := s.divergence(); d != "" {
		s.fail(checkLiveness, "liveness: replicas did not converge within %v of healing: %s", time.Duration(deadline()-s.healAt), d)
	}
	if s.cp != nil {
		for w.now < deadline() && s.cp.unsettled() != "" {
			w.run(w.now + int64(100*time.Millisecond))
		}
		if u := s.cp.unsettled(); u != "" {
			s.fail(checkControlPlane, "liveness: the control plane did not settle within %v of healing: %s", time.Duration(deadline()-s.healAt), u)
		} else {
			s.w.record("control plane settled %v after the heal", time.Duration(w.now-s.healAt))
		}
	}
}

// finalRead reads every stream to its end through the Kafka path.
func (s *Sim) finalRead() {
	w := s.w
	finals := map[string]*client{}
	// The streams known now: one whose create completes during the read
	// has no writes to read (seed 46 -sim.controlplane: it had no reader).
	streams := slices.Clone(s.streams)
	for _, st := range streams {
		c := s.newClient(len(s.clients), st, true)
		s.clients = append(s.clients, c)
		finals[st] = c
		w.after(0, nil, c.loop)
	}
	end := w.now + int64(10*time.Second)
	for w.now < end {
		done := true
		for _, c := range finals {
			done = done && c.finalDone
		}
		if done {
			break
		}
		w.run(w.now + int64(50*time.Millisecond))
	}
	for _, st := range streams {
		if !finals[st].finalDone {
			s.fail(checkFinalRead, "final read of %s did not complete", st)
		}
		finals[st].stopped = true
		finals[st].abandon("end")
	}
}

// checkRun runs the checker on the recorded history and the replicas.
func (s *Sim) checkRun(res *Result) {
	hist := s.rec.History()
	res.Ops = len(hist)
	opts := checker.Options{Timeout: 30 * time.Second, Replicas: s.replicas(), Parallelism: 1}
	for _, win := range s.windows {
		opts.Faults = append(opts.Faults, win.fw)
	}
	res.Check = checker.Check(hist, opts)
	if s.cp != nil {
		s.cp.checkCreates()
	}
	if !res.Check.OK && s.cfg.OutDir != "" {
		opts.OutDir = s.cfg.OutDir
		checker.Check(hist, opts)
	}
	for _, sr := range res.Check.Streams {
		for _, f := range sr.Failures {
			s.fail(checkerCheck(sr, f), "checker: stream %s: %s", sr.Stream, f)
		}
	}
	for _, e := range res.Check.Errors {
		s.fail(checkHistory, "checker: malformed history: %s", e)
	}
	if res.Check.Ordering.Count > 0 {
		for _, k := range sortedKeys(res.Check.OrderingKinds) {
			s.fail(check("ordering:"+string(k)), "checker: ordering: %d %s violations", res.Check.OrderingKinds[k], k)
		}
		for _, v := range res.Check.Ordering.Examples {
			s.w.record("ordering violation: %s conn %d: %s", v.Kind, v.Conn, v.Detail)
			s.failures = append(s.failures, fmt.Sprintf("checker: ordering: %s conn %d: %s", v.Kind, v.Conn, v.Detail))
		}
	}
}
