package simulator

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
)

// The transport's queue across a reconnection (raftnode/transport): when a
// peer's stream breaks young (it lived under a second), the writer backs
// off (up to two seconds) before it redials, and whatever is sent to the
// peer meanwhile is queued, not dropped: only a failed dial drops the
// queue. The next connection writes it, to whatever process answers then —
// one that restarted, perhaps on an empty disk with a new data dir. So each
// message goes out only if the peer presents the data dir it was decided
// for (server.Roster.Addressee, checked by transport.SendTo). The network
// (sendRaft) otherwise drops at once what is sent to a process that is
// down; here a sender that finds a peer down holds, one time in two, what
// it sends it until a redial 50 ms to 3 s later (a backoff, or a dial to
// an unreachable host hanging until its 3 s timeout), which delivers it if
// the peer is back (the data dir checked) or drops it all, reported
// unreachable. Campaign dc3_replace: a leader's heartbeat, held across a
// crash-looping follower's wipe, told the wiped process its old disk's
// commit index, and it fail-stopped.

// outQueue is a sender's queue to one peer whose stream broke.
type outQueue struct {
	inc  int  // the peer's incarnation (down) when its stream broke
	hold bool // backing off: sends are queued until the redial
	msgs []queuedMsg
}

type queuedMsg struct {
	group uint64
	m     *raftpb.Message
	dir   uint64 // the data dir it was decided for (0: any)
}

// queue reports whether m, which from sends to the down peer to, waits in
// from's transport queue for the next connection.
func (s *Sim) queue(from, to *node, group uint64, m *raftpb.Message) bool {
	if m.GetType() == raftpb.MsgSnap {
		return false // reported as it goes (sendRaft); never held here
	}
	q := from.outq[to.id]
	if q == nil || q.inc != to.inc {
		q = &outQueue{inc: to.inc, hold: s.queueR.IntN(2) == 0}
		if from.outq == nil {
			from.outq = map[uint64]*outQueue{}
		}
		from.outq[to.id] = q
		if q.hold {
			s.w.after(durn(s.queueR, 50*time.Millisecond, 3*time.Second), from, func() { s.redial(from, to, q) })
		}
	}
	if !q.hold {
		return false
	}
	q.msgs = append(q.msgs, queuedMsg{group: group, m: cloneMsg(m), dir: from.roster.Addressee(to.id)})
	return true
}

// redial ends from's backoff towards to: the queue goes out on the new
// connection, or is dropped if to cannot be reached.
func (s *Sim) redial(from, to *node, q *outQueue) {
	msgs := q.msgs
	q.msgs, q.hold = nil, false
	up := !to.down && s.cut[[2]uint64{from.id, to.id}] == 0
	stale := 0
	for _, qm := range msgs {
		if qm.dir != 0 && qm.dir != to.dirID {
			stale++
		}
	}
	if up {
		from.link(to) // the handshake (a refused dir is still connected to)
		s.w.record("n%d redials n%d (data dir %016x): %d queued messages, %d of them for another data dir", from.id, to.id, to.dirID, len(msgs), stale)
		if stale > 0 {
			s.w.faults["queued-for-another-dir"]++
		}
	}
	for _, qm := range msgs {
		if !up || (qm.dir != 0 && qm.dir != to.dirID && !canary.On(canary.QueueAnyDir)) {
			from.rn.ReportUnreachable(qm.group, to.id)
			continue
		}
		msg, group := qm.m, qm.group
		s.w.at(s.inOrder(from, to), to, func() {
			if !to.hears(from, msg.GetType()) {
				return
			}
			to.rn.Step(group, msg)
			to.flush()
		})
	}
	from.flush()
}
