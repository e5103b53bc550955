package raftnode

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/storage"
)

// group is one Raft group's state inside the core.
type group struct {
	id          uint64
	rn          *raft.RawNode
	st          Storage
	role        raft.StateType
	lead        uint64
	leadChanges uint64 // times lead changed since the group started here (metrics)
	applied     uint64
	appliedTerm uint64
	hwm         int64

	// pending proposals by log index. Two proposals can share an index
	// (one from an old term that was overwritten, one from a new term):
	// the applied entry's term tells which one won.
	pending     map[uint64][]pending
	uncommitted uint64

	// Proposals not yet stepped into raft (see TakeEffects), the number of
	// appends not yet durable, and (sync writes only) the Ready being
	// persisted.
	queued    []queuedProposal
	appending int
	reads     []ProposalID // ReadIndex requests raft has not answered
	waiting   *raft.Ready

	// ticks counts the group's ticks; heard is the tick each peer was
	// last heard from (for Progress.RecentActive: raft's own flag is
	// cleared at every CheckQuorum round, so it says little between them).
	ticks uint64
	heard map[uint64]uint64

	prod  *prodState // idempotent producers (producer_state.go)
	stamp stamper    // a leader's stamps of its proposals (stamp.go)

	succ *succession // its place in the succession of a silent leader (succession.go)
	// ahead: as a follower that knows no leader, it refused a campaign
	// for a log behind its own, and so ticks past the campaign bound
	// (campaign.go).
	ahead bool
}

type pending struct {
	id   ProposalID
	term uint64
	size uint64
	// A proposal merged with others takes offsets [base+skip,
	// base+skip+offsets) of its entry; one alone takes the whole entry.
	merged        bool
	skip, offsets int64
	// dedup: a retry answered with the offsets of the batches it repeats
	// ([base+skip, base+skip+offsets) of the entry); it proposed nothing.
	dedup bool
}

type queuedProposal struct {
	id      ProposalID
	entry   *raftpb.Entry
	offsets int64 // what a user payload takes (storage.UserOffsets)
}

// apply applies committed entries in order. Applying a user entry only moves
// the high watermark (offsets were stamped at append); conf changes go into
// raft and are recorded; commands become effects.
func (c *Core) apply(g *group, ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	for _, e := range ents {
		idx := e.GetIndex()
		if idx <= g.applied {
			continue // replayed after a restart: already applied
		}
		g.assertAppliesNext(idx)
		c.noteApplied(g, e)
		var base, next int64
		var err error
		c.applyProducers(g, e, c.entryBase(g, e))
		switch e.GetType() {
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeI
			if cc, err = confChangeOf(e); err == nil {
				c.applyConfChange(g, idx, cc)
			}
		default:
			data := e.GetData()
			switch {
			case len(data) > 0 && data[0] == storage.TagUser:
				base, next, err = g.st.EntryOffsets(idx)
			case len(data) > 0 && data[0] == storage.TagCommand:
				var cmd Command
				cmd, err = DecodeCommand(data)
				if err == nil && cmd.Kind == CmdConfig {
					c.emit(SetConfig{Group: g.id, Index: idx, Reset: cmd.Reset, Ops: cmd.Ops})
				}
				if err == nil && cmd.Kind == CmdRetain {
					// Never beyond what is committed at this point of the log:
					// every replica computes the same bound.
					before := cmd.BeforeOffset
					if end, e := g.st.NextOffsetAt(idx); e == nil && !canary.On(canary.RetainAboveCommit) {
						before = min(before, end)
					}
					// The producer state is saved first: a restart must not
					// need the entries this may delete.
					c.maybeSaveProducers(g, true)
					c.emit(Retain{Group: g.id, Index: idx, BeforeOffset: before})
				}
			}
		}
		if err != nil {
			err = fmt.Errorf("raftnode: group %d: apply entry %d: %w", g.id, idx, err)
			c.cfg.Logger.Errorf("%v", err)
		}
		g.resolve(c, idx, e.GetTerm(), base, next, err)
		g.applied, g.appliedTerm = idx, e.GetTerm()
	}
	if hwm, err := g.st.NextOffsetAt(g.applied); err == nil {
		g.hwm = hwm
	}
	c.maybeSaveProducers(g, false)
	c.emit(Applied{Group: g.id, Index: g.applied, Term: g.appliedTerm, HighWatermark: g.hwm})
}

// assertAppliesNext: committed entries are applied one after another, with
// no gap (raft hands them over in order, from the applied index it was
// started with, and after a snapshot from the snapshot's index). A gap
// would leave an entry's proposals and effects (a conf change, a
// retention) never applied here: a bug, so the core panics rather than
// carry on with a state no other replica has.
func (g *group) assertAppliesNext(idx uint64) {
	if idx != g.applied+1 {
		panic(fmt.Sprintf("raftnode: group %d: entry %d applied right after entry %d", g.id, idx, g.applied))
	}
}

// assertOffsetsCounted: the offsets the proposals of entry idx were
// counted to take when proposed (by the Kafka front end's validation,
// Core.ProposeRecords, or storage.UserOffsets) are the offsets the storage
// stamped for the entry, [base, next): one proposal alone takes them all,
// merged ones end where the entry ends. The other end of the count's
// journey; a mismatch would acknowledge records at offsets they do not
// have.
func (g *group) assertOffsetsCounted(idx uint64, ps []pending, term uint64, base, next int64) {
	end, counted := base, false
	for _, p := range ps {
		if p.term != term {
			return // overwritten: nothing of it is in the entry
		}
		if p.dedup {
			continue // a retry: it proposed nothing
		}
		counted = true
		if p.merged {
			end = max(end, base+p.skip+p.offsets)
		} else {
			end = base + p.offsets
		}
	}
	if counted && end != next {
		panic(fmt.Sprintf("raftnode: group %d: entry %d holds offsets [%d, %d) but its proposals were counted to end at %d",
			g.id, idx, base, next, end))
	}
}

func (c *Core) applyConfChange(g *group, idx uint64, cc raftpb.ConfChangeI) {
	cs := c.raw(g).ApplyConfChange(cc)
	c.emit(SaveConfState{Group: g.id, Index: idx, Conf: cs, Context: cc.AsV2().GetContext()})
}

// resolve completes the proposals waiting on index idx.
func (g *group) resolve(c *Core, idx, term uint64, base, next int64, err error) {
	ps, ok := g.pending[idx]
	if !ok {
		return
	}
	delete(g.pending, idx)
	if err == nil {
		g.assertOffsetsCounted(idx, ps, term, base, next)
	}
	for _, p := range ps {
		g.uncommitted -= p.size
		switch {
		case p.term != term:
			c.emit(Complete{Group: g.id, ID: p.id, Index: idx, Err: ErrOverwritten})
		case p.merged && err == nil:
			c.emit(Complete{Group: g.id, ID: p.id, Index: idx, BaseOffset: base + p.skip, NextOffset: base + p.skip + p.offsets})
		default:
			c.emit(Complete{Group: g.id, ID: p.id, Index: idx, BaseOffset: base, NextOffset: next, Err: err})
		}
	}
}

// failAll fails every pending and queued proposal in index order.
func (g *group) failAll(c *Core, err error) {
	idxs := make([]uint64, 0, len(g.pending))
	for idx := range g.pending {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		for _, p := range g.pending[idx] {
			c.emit(Complete{Group: g.id, ID: p.id, Index: idx, Err: err})
		}
	}
	for _, q := range g.queued {
		c.emit(Complete{Group: g.id, ID: q.id, Err: err})
	}
	for _, id := range g.reads {
		c.readFailed(g, id, err)
	}
	g.prod.failDuplicates(c, g, err)
	g.reads = nil
	g.pending = map[uint64][]pending{}
	g.queued = nil
	g.uncommitted = 0
}
