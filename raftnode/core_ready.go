package raftnode

import (
	"encoding/binary"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
)

// Ready handling: raft's Ready turned into effects (appends, sends,
// completions), and the driver's reports that an append or a snapshot is
// durable.

// AppendDone reports that the Append effect carrying m is durable. A failed
// append is fatal for the group's log (the driver stops the server): raft
// cannot continue from an unknown disk state.
func (c *Core) AppendDone(group uint64, m *raftpb.Message) {
	g, ok := c.groups[group]
	if !ok {
		return
	}
	c.snapshotDone(g, m.GetSnapshot())
	if c.cfg.SyncWrites {
		rd := g.waiting
		if rd == nil {
			return
		}
		g.waiting = nil
		c.sendAll(g, rd.Messages)
		c.apply(g, rd.CommittedEntries)
		c.raw(g).Advance(*rd)
		if len(g.queued) > 0 && !c.transferring(g) {
			qs := g.queued
			g.queued = nil
			c.proposeNow(g, qs)
		}
		c.drain(g)
		return
	}
	g.appending--
	if canary.On(canary.AckBeforeCommit) && g.role == raft.StateLeader {
		c.ackEarly(g, m)
	}
	for _, r := range m.GetResponses() {
		if r.GetTo() == c.cfg.ID {
			_ = c.raw(g).Step(r)
		} else {
			c.emit(Send{Group: g.id, Msg: r})
		}
	}
	c.drain(g)
}

// ackEarly (canary.AckBeforeCommit) completes the leader's proposals as
// soon as its own append of them is durable, before a quorum has them.
func (c *Core) ackEarly(g *group, m *raftpb.Message) {
	ents := m.GetEntries()
	if len(ents) == 0 {
		return
	}
	last := ents[len(ents)-1].GetIndex()
	var idxs []uint64
	for idx := range g.pending {
		if idx <= last && idx > g.applied {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		term, err := g.st.Term(idx)
		base, next, oerr := g.st.EntryOffsets(idx)
		if err == nil && oerr == nil {
			g.resolve(c, idx, term, base, next, nil)
		}
	}
}

// snapshotDone moves the applied state to an installed snapshot: the log
// now starts after it and nothing before it will be applied entry by entry.
func (c *Core) snapshotDone(g *group, snap *raftpb.Snapshot) {
	md := snap.GetMetadata()
	if md.GetIndex() <= g.applied {
		if md.GetIndex() != 0 && !g.prod.ready {
			c.installedProducers(g)
		}
		return
	}
	idxs := make([]uint64, 0, len(g.pending))
	for idx := range g.pending {
		if idx <= md.GetIndex() {
			idxs = append(idxs, idx)
		}
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		for _, p := range g.pending[idx] {
			g.uncommitted -= p.size
			c.emit(Complete{Group: g.id, ID: p.id, Index: idx, Err: ErrUnknownOutcome})
		}
		delete(g.pending, idx)
	}
	g.applied, g.appliedTerm = md.GetIndex(), md.GetTerm()
	if q := c.q.quiet[g.id]; q != nil {
		q.status = nil
	}
	c.installedProducers(g)
	if hwm, err := g.st.NextOffsetAt(g.applied); err == nil {
		g.hwm = hwm
	}
	c.emit(Applied{Group: g.id, Index: g.applied, Term: g.appliedTerm, HighWatermark: g.hwm})
}

// drain handles every Ready the group has.
func (c *Core) drain(g *group) {
	if q := c.q.quiet[g.id]; q != nil {
		q.status = nil // stepped or woken: its status may change
	}
	for g.waiting == nil && c.raw(g).HasReady() {
		c.handleReady(g, c.raw(g).Ready())
	}
}

func (c *Core) handleReady(g *group, rd raft.Ready) {
	if rd.SoftState != nil {
		c.noteSoftState(g, rd.SoftState)
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := ProposalID(binary.BigEndian.Uint64(rs.RequestCtx))
		if i := slices.Index(g.reads, id); i >= 0 {
			g.reads = slices.Delete(g.reads, i, i+1)
			c.readAnswered(g, id, rs.Index)
		}
	}
	if c.cfg.SyncWrites {
		c.handleSyncReady(g, rd)
		return
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			c.noteAppend(g, m)
			g.appending++
			c.emit(Append{Group: g.id, Msg: m, Leader: g.lead})
		case raft.LocalApplyThread:
			c.apply(g, m.GetEntries())
			for _, r := range m.GetResponses() {
				_ = c.raw(g).Step(r)
			}
		default:
			c.emit(Send{Group: g.id, Msg: m})
		}
	}
}

// handleSyncReady persists first, then sends and applies (in AppendDone).
func (c *Core) handleSyncReady(g *group, rd raft.Ready) {
	needWrite := len(rd.Entries) > 0 || !raft.IsEmptyHardState(rd.HardState) || !raft.IsEmptySnap(rd.Snapshot)
	if !needWrite {
		c.sendAll(g, rd.Messages)
		c.apply(g, rd.CommittedEntries)
		c.raw(g).Advance(rd)
		return
	}
	m := &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), To: new(raft.LocalAppendThread), From: new(c.cfg.ID), Entries: rd.Entries}
	if !raft.IsEmptyHardState(rd.HardState) {
		m.Term, m.Vote, m.Commit = new(rd.HardState.GetTerm()), new(rd.HardState.GetVote()), new(rd.HardState.GetCommit())
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		m.Snapshot = rd.Snapshot
	}
	g.waiting = &rd
	c.noteAppend(g, m)
	c.emit(Append{Group: g.id, Msg: m, Leader: g.lead})
}

func (c *Core) sendAll(g *group, msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetTo() == c.cfg.ID {
			_ = c.raw(g).Step(m)
			continue
		}
		c.emit(Send{Group: g.id, Msg: m})
	}
}

func (c *Core) noteSoftState(g *group, ss *raft.SoftState) {
	if ss.RaftState != raft.StateLeader {
		// raft drops pending read requests when leadership goes; say so.
		for _, id := range g.reads {
			c.readFailed(g, id, ErrNotLeader)
		}
		g.reads = nil
		// Proposals still queued belong to the term that is going: kept,
		// they were stepped into raft once this server led again, in a
		// later term, after an earlier proposal of their connection had
		// been stepped in the old one and overwritten — a hole in the
		// connection's writes (simulator seed 2226 with the control plane:
		// an idempotent producer's sequence 34 lost, 35-37 written).
		qs := g.queued
		g.queued = nil
		c.refuseQueued(g, qs)
		// Proposals stepped into raft in the term that is going may yet be
		// overwritten, and the next of their connection would go into a
		// later term, which this server may lead too: written after a hole
		// (simulator seed 33436 with the control plane: a connection's
		// produce stepped in term 15 and overwritten by term 17's leader,
		// its next one taken by the same server leading term 18). Their
		// chains refuse what they propose next.
		for _, ps := range g.pending {
			for _, p := range ps {
				c.chains.breakOf(p.id)
			}
		}
	}
	c.noteRole(g, ss.RaftState)
	if ss.Lead != g.lead {
		g.leadChanges++
		g.ahead = false
	}
	g.lead = ss.Lead
	c.emit(LeaderChanged{Group: g.id, Leader: ss.Lead, Term: c.raw(g).BasicStatus().GetTerm(), Role: ss.RaftState.String()})
}
