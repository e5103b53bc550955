package simulator

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// The raft connections between servers, as raftnode/transport keeps them:
// each server dials each peer (eagerly, and again a few hundred ms after a
// stream broke) and the handshake at the start of a stream is the only
// time either end learns the other's data dir (server.Roster.Admit).
// While the stream lives nothing is checked again: a server that forgot a
// peer's dir (it left every group here) does not learn it anew until the
// stream breaks. Before, the model admitted peers at every message and
// hid exactly that (TestControlledMoveBackAndForth: a leader that forgot
// the server it was asked to add back refused it as "not connected" for
// as long as the stream lived). A stream breaks when either end stops or
// restarts, and when a partition cuts the pair (the writer's timeouts).

// link is n's outgoing stream to a peer: up while both ends are the
// incarnations that met at its handshake.
type link struct {
	from, to int    // the incarnations of both ends at the handshake
	dir      uint64 // the data dir the peer presented
}

// link returns n's stream to p, dialing it if it is down and p can be
// reached now (the handshake: both ends admit each other; a refused dir is
// still connected to, as the transport does).
func (n *node) link(p *node) (link, bool) {
	s := n.s
	if n.down || p.down || p.paused || s.cut[[2]uint64{n.id, p.id}] > 0 || s.cut[[2]uint64{p.id, n.id}] > 0 {
		return link{}, false
	}
	if l, ok := n.links[p.id]; ok && l.from == n.inc && l.to == p.inc {
		return l, true
	}
	if !p.admits(n) || !n.admits(p) {
		s.w.faults["peer-dir-changed"]++
	}
	l := link{from: n.inc, to: p.inc, dir: p.dirID}
	if n.links == nil {
		n.links = map[uint64]link{}
	}
	n.links[p.id] = l
	return l, true
}

// admits is the raft handshake on n's end: it records p's data dir, and
// reports whether p presents the one n knows it by.
func (n *node) admits(p *node) bool {
	_, err := n.roster.Admit(p.id, p.dirID)
	return err == nil
}

// breakLinks breaks the streams between a and b both ways (a partition).
func (s *Sim) breakLinks(a, b uint64) {
	if na, nb := s.node(a), s.node(b); na != nil && nb != nil {
		delete(na.links, b)
		delete(nb.links, a)
	}
}

// connected reports whether n's stream to p is up and the data dir p
// presented at its handshake (transport.PeerStats Connected and Dir).
func (n *node) connected(p *node) (bool, uint64) {
	if p == nil || n.down || p.down || p.paused || n.s.cut[[2]uint64{n.id, p.id}] > 0 {
		return false, 0
	}
	l, ok := n.links[p.id]
	if !ok || l.from != n.inc || l.to != p.inc {
		return false, 0
	}
	return true, l.dir
}

// tells reports whether n sends a message of type t in group to p: the
// stream to p is dialed first if it is down (the transport queues the
// message meanwhile), and a peer with another data dir than the one n
// knows is told only answers, one that left the group no requests
// (server.Roster.Tells). A process that is down presents no data dir: n
// goes by what it knew (a wiped server's new dir is learned only when it
// runs again, and what n sends it meanwhile may wait in n's transport
// queue: queue.go).
func (n *node) tells(p *node, group uint64, t raftpb.MessageType) bool {
	n.link(p)
	if n.s.cfg.modelBefore1203 && !p.down {
		n.admits(p)
	}
	return n.roster.Tells(p.id, group, t)
}

// hears reports whether n hears a message of type t from p, which came on
// p's stream (whose handshake n admitted): a peer with another data dir
// than the one n knows is heard only as a leader or a candidate
// (server.Roster.Hears).
func (n *node) hears(p *node, t raftpb.MessageType) bool {
	if n.s.cfg.modelBefore1203 {
		n.admits(p)
	}
	return n.roster.Hears(p.id, t)
}

// handshakes models the transports' eager dials: every few hundred ms
// each running server dials each peer it reaches whose stream is down, so
// each learns (or refuses) the other's data dir even when no raft message
// flows between them.
func (s *Sim) handshakes() {
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if a != b {
				a.link(b)
			}
		}
	}
	s.w.after(300*time.Millisecond, nil, s.handshakes)
}
