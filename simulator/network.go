package simulator

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// The network: raft messages are datagrams (lost, duplicated, delayed so
// reordered, cut by partitions); Kafka connections are in-order streams.

func (s *Sim) linkLatency(a, b *node) time.Duration {
	base := s.lat[a.dc][b.dc]
	d := base + time.Duration(s.netR.Int64N(int64(base)/5+1)) + s.clog[[2]uint64{a.id, b.id}]
	if s.w.bug.fire(s.netR, "net.delay-spike", 0.02) {
		d += durn(s.netR, 20*time.Millisecond, 120*time.Millisecond)
	}
	return d
}

// sendRaft puts a raft message on the wire: it may be lost, duplicated,
// delayed (so reordered) or cut by a partition.
func (s *Sim) sendRaft(from *node, group uint64, m *raftpb.Message) {
	to := s.node(m.GetTo())
	if to == nil {
		return
	}
	// The transport reports what happened to a snapshot to the sender
	// (as raftnode/transport's SnapshotStatus does); an unreachable peer
	// is reported too.
	snap := m.GetType() == raftpb.MsgSnap
	delivered := false
	if snap {
		s.w.after(s.linkLatency(from, to)*2+time.Millisecond, from, func() {
			from.rn.ReportSnapshot(group, to.id, delivered)
			from.flush()
		})
	}
	// A peer with another data dir than the one known is told only
	// answers (server.Roster.Tells): the rest is dropped unreported.
	if !from.tells(to, group, m.GetType()) {
		return
	}
	if to.down && s.cut[[2]uint64{from.id, to.id}] == 0 && s.queue(from, to, group, m) {
		return // held in the transport's queue until a redial (queue.go)
	}
	if s.cut[[2]uint64{from.id, to.id}] > 0 || to.down {
		s.w.after(s.linkLatency(from, to), from, func() {
			from.rn.ReportUnreachable(group, to.id)
			from.flush()
		})
		return
	}
	if s.netR.Float64() < 0.002 && !snap {
		s.w.faults["net-loss"]++
		return
	}
	copies := 1
	if s.w.bug.fire(s.netR, "net.duplicate", 0.02) {
		copies = 2
		s.w.faults["net-duplicate"]++
	}
	for i := 0; i < copies; i++ {
		msg := cloneMsg(m)
		s.w.after(s.linkLatency(from, to), to, func() {
			if !to.hears(from, msg.GetType()) {
				return // a server with another data dir, not heard (server.Roster.Hears)
			}
			delivered = true
			to.rn.Step(group, msg)
			to.flush()
		})
	}
}

func (s *Sim) clientLatency(n *node) time.Duration {
	return s.lat[0][n.dc] + time.Duration(s.netR.Int64N(int64(50*time.Microsecond)))
}

// toClient sends response bytes over the connection, in order (TCP).
func (s *Sim) toClient(sc *sconn, data []byte) {
	c := sc.c
	if s.clientCut[sc.n.id] > 0 {
		sc.reset("network partition")
		return
	}
	t := max(s.w.now+int64(c.lat()), c.lastDown)
	c.lastDown = t
	s.w.at(t, nil, func() { c.receive(data) })
}

func (s *Sim) closeToClient(sc *sconn) {
	c := sc.c
	t := max(s.w.now+int64(c.lat()), c.lastDown)
	c.lastDown = t
	s.w.at(t, nil, func() { c.broken("closed by server") })
}

// cutLink adds d to the cuts of a's messages to b; a cut breaks the
// streams between them.
func (s *Sim) cutLink(a, b uint64, d int) {
	s.cut[[2]uint64{a, b}] += d
	if d > 0 {
		s.breakLinks(a, b)
	}
}
