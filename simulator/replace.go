package simulator

import (
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/server"
	"github.com/vdl-project/vdl/vfs"
)

// Replacing a server whose disk was lost, as an operator does it
// (docs/operations.md, vdlctl member replace N): the nemesis wipes a
// server's disk; it restarts on the empty disk with a new data dir id,
// joining (its streams start empty); its peers refuse it (server.Roster)
// until the replacement removes it from every group, adds it back as a
// learner (the change names its new data dir) and promotes it once caught
// up. Every step is checked with server.CheckMemberChange, like the admin
// API, and proposed on the group's leader; a refused or failed step is
// retried. Nothing acknowledged may be lost, and the cluster must converge
// with the replaced server a voter again.

type replacePhase int

const (
	removing replacePhase = iota
	adding
	promoting
)

type replacement struct {
	n       *node
	phase   replacePhase
	started int64
	pending map[uint64]int64 // groups with a change in flight, until when (a crashed leader never answers)
}

// admits is the raft handshake on n's end: it records p's data dir, and
// reports whether p presents the one n knows it by.
func (n *node) admits(p *node) bool {
	_, err := n.roster.Admit(p.id, p.dirID)
	return err == nil
}

// tells reports whether n sends a message of type t in group to p (the
// handshake records p's dir first): a peer with another data dir than the
// one n knows is told only answers, and one that left the group no
// requests (server.Roster.Tells). A process that is down presents no data
// dir: n goes by what it knew (a wiped server's new dir is learned only
// when it runs again, and what n sends it meanwhile may wait in n's
// transport queue: queue.go).
func (n *node) tells(p *node, group uint64, t raftpb.MessageType) bool {
	if !p.down {
		n.admits(p)
	}
	return n.roster.Tells(p.id, group, t)
}

// hears reports whether n hears a message of type t from p: a peer with
// another data dir than the one n knows is heard only as a leader or a
// candidate (server.Roster.Hears).
func (n *node) hears(p *node, t raftpb.MessageType) bool {
	n.admits(p)
	return n.roster.Hears(p.id, t)
}

// connected reports whether n's raft connection to p is up: p runs, n
// reaches it, and the handshake accepted the data dir n knows it by (as
// the transport's PeerStats.Connected).
func (n *node) connected(p *node, dir uint64) bool {
	s := n.s
	return !p.down && !p.paused && s.cut[[2]uint64{n.id, p.id}] == 0 && p.dirID == dir
}

// handshakes models the transports' connections, dialed eagerly and
// redialed every few hundred ms: every pair of running servers that can
// reach each other meets, so each learns (or refuses) the other's data dir
// even when no raft message flows between them.
func (s *Sim) handshakes() {
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			if a == b || a.down || b.down || a.paused || b.paused || s.cut[[2]uint64{a.id, b.id}] > 0 {
				continue
			}
			if !b.admits(a) || !a.admits(b) {
				s.w.faults["peer-dir-changed"]++
			}
		}
	}
	s.w.after(300*time.Millisecond, nil, s.handshakes)
}

// wipe is the nemesis' disk replacement: n loses its disk and restarts on
// an empty one, then the replacement starts.
func (s *Sim) wipe(n *node, d time.Duration) {
	n.stop(true)
	n.promised = nil // a new disk promises nothing
	n.setDisk(vfs.NewMem())
	n.dirID = s.dirR.Uint64() | 1
	n.roster = server.NewRoster(nil)
	n.joining = true
	s.w.fault(FaultWipeDisk.String(), "n%d loses its disk; back on an empty one (data dir %016x) after %v", n.id, n.dirID, d)
	s.replacing = &replacement{n: n, started: s.w.now, pending: map[uint64]int64{}}
	s.w.after(d, nil, func() {
		if err := n.fs.MkdirAll(n.dir()); err != nil {
			s.fail(checkHarness, "wipe: %v", err)
			return
		}
		_ = n.fs.SyncDir("/")
		_ = n.fs.SyncDir(n.dir())
		s.restart(n)
	})
	s.w.after(200*time.Millisecond, nil, s.stepReplacement)
}

// stepReplacement moves the replacement on by one step per group.
func (s *Sim) stepReplacement() {
	r := s.replacing
	if r == nil {
		return
	}
	defer s.w.after(200*time.Millisecond, nil, s.stepReplacement)
	id := r.n.id
	done := true
	for _, g := range s.groups {
		l := s.leader(g)
		if l == nil || r.pending[g] > s.w.now {
			done = false
			continue
		}
		gs, ok := l.rn.Status(g)
		if !ok {
			done = false
			continue
		}
		voter, learner := slices.Contains(gs.Voters, id), slices.Contains(gs.Learners, id)
		var c server.MemberChange
		switch {
		case r.phase == removing && (voter || learner):
			c = server.Remove
		case r.phase == removing:
			continue
		case !voter && !learner:
			c = server.AddLearner
		case r.phase == adding || voter:
			continue
		default:
			c = server.Promote
		}
		done = false
		dir, known := l.roster.Dir(id)
		cand := server.Candidate{ID: id, DirKnown: known, Stale: l.roster.Stale(id), Connected: l.connected(r.n, dir)}
		if err := server.CheckMemberChange(c, gs, s.streams[slices.Index(s.groups, g)], cand, l.id); err != nil {
			s.w.record("replacement of n%d: g%d %v not now: %v", id, g, c.ConfChange(), err)
			continue // not now (no quorum, not caught up, not connected yet): retried
		}
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: c.ConfChange().Enum(), NodeId: new(id)}}}
		if c != server.Remove {
			cc.Context = server.MemberContext(id, dir)
		}
		r.pending[g] = s.w.now + int64(3*time.Second)
		s.w.runIn(l, func() {
			l.proposeConfChange(g, cc, func(err error) {
				delete(r.pending, g)
				s.w.record("replacement of n%d: g%d %v: %v", id, g, c.ConfChange(), err)
			})
		})
	}
	if !done {
		return
	}
	switch r.phase {
	case removing:
		r.phase = adding
	case adding:
		r.phase = promoting
	case promoting:
		s.w.record("replacement of n%d done after %v", id, time.Duration(s.w.now-r.started))
		s.replacing = nil
	}
}

// replacementState describes an unfinished replacement for divergence.
func (s *Sim) replacementState() string {
	if r := s.replacing; r != nil {
		return fmt.Sprintf("the replacement of n%d is in phase %d", r.n.id, r.phase)
	}
	return ""
}
