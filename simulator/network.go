package simulator

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
)

// The network: raft messages travel on a stream per pair of servers, in
// order (the transport's TCP streams, inOrder); they may be lost (a stream
// that breaks, a queue that overflows) or cut by partitions, and, under
// net.delay-spike and net.duplicate, one may arrive late or twice, out of
// order. Kafka connections are in-order streams.

func (s *Sim) linkLatency(a, b *node) time.Duration {
	lat, spike := s.linkDelay(a, b)
	return lat + spike
}

// linkDelay is a message's latency from a to b (the DC pair's, jitter, a
// clog) and, under net.delay-spike, a spike of its own.
func (s *Sim) linkDelay(a, b *node) (lat, spike time.Duration) {
	base := s.lat[a.dc][b.dc]
	lat = base + time.Duration(s.netR.Int64N(int64(base)/5+1)) + s.clog[[2]uint64{a.id, b.id}]
	if s.w.bug.fire(s.netR, "net.delay-spike", 0.02) {
		spike = durn(s.netR, 20*time.Millisecond, 120*time.Millisecond)
	}
	return lat, spike
}

// inOrder is when a message sent now from a to b arrives on their stream:
// after its latency, and not before the message sent before it. Delivered
// as datagrams (each after its own latency), the jitter alone reordered
// most messages on a link, which TCP never does: with tiny append
// messages and inflight windows (core.small-messages) a follower rejected
// the appends that overtook each other and its leader went back to probing
// (seed 5035's course before). A spike delays its message alone, which
// arrives after its successors (as one read off a dying stream after its
// successor on the new one): holding the stream instead, 2% of messages
// spiked kept a busy link always behind one, and TestSimManyStreams lost
// its leaders.
func (s *Sim) inOrder(a, b *node) int64 {
	lat, spike := s.linkDelay(a, b)
	t := s.w.now + int64(lat)
	if !s.cfg.modelBefore1203 {
		link := [2]uint64{a.id, b.id}
		t = max(t, s.lastOnLink[link])
		s.lastOnLink[link] = t
	}
	return t + int64(spike)
}

// sendRaft puts a raft message on its stream: it may be lost, duplicated,
// delayed or cut by a partition.
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
	// The data dir it is decided for, checked when it goes out on a
	// stream (transport.SendTo): a stream to a paused peer that restarted
	// since cannot finish its handshake until the peer runs again, and
	// then presents its new dir (seed 8847: a stale leader's heartbeat,
	// decided for a wiped server's old disk, reached its new one held
	// across a pause, and it fail-stopped on the commit index).
	dir := from.roster.Addressee(to.id)
	copies := 1
	if s.w.bug.fire(s.netR, "net.duplicate", 0.02) {
		copies = 2
		s.w.faults["net-duplicate"]++
	}
	for i := 0; i < copies; i++ {
		msg := cloneMsg(m)
		var at int64
		if i == 0 {
			at = s.inOrder(from, to)
		} else { // the duplicate: a datagram of its own
			at = s.w.now + int64(s.linkLatency(from, to))
		}
		s.w.at(at, to, func() {
			if dir != 0 && dir != to.dirID && !canary.On(canary.QueueAnyDir) {
				s.w.faults["sent-to-another-dir"]++
				return
			}
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
