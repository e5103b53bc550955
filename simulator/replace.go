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

// wipe is the nemesis' disk replacement: n loses its disk and restarts on
// an empty one, then the replacement starts.
func (s *Sim) wipe(n *node, d time.Duration) {
	n.stop(true)
	n.promised = nil // a new disk promises nothing
	n.setDisk(vfs.NewMem())
	n.dirID = s.dirR.Uint64() | 1
	n.roster = server.NewRoster(nil, nil)
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
		up, conn := l.connected(r.n)
		cand, dir := l.roster.Candidate(id, up, conn)
		if err := server.CheckMemberChange(c, gs, s.streams[slices.Index(s.groups, g)], cand, l.id); err != nil {
			s.w.record("replacement of n%d: g%d %v not now: %v", id, g, c.ConfChange(), err)
			continue // not now (no quorum, not caught up, not connected yet): retried
		}
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: c.ConfChange().Enum(), NodeId: new(id)}}}
		if c != server.Remove {
			cc.Context = server.MemberContext(id, dir, l.roster.MemberDirs(g, l.id, l.dirID))
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
