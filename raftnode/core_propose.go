package raftnode

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
)

// Proposals: checked, queued while appends are in flight, merged into
// few entries and proposed to raft.

// Propose proposes data (UserData or a command) in a group. The result
// arrives as a Complete effect with the same id.
func (c *Core) Propose(group uint64, id ProposalID, data []byte) {
	var offsets int64
	if len(data) > 0 && data[0] == storage.TagUser && c.diskFull {
		c.emit(Complete{Group: group, ID: id, Err: ErrDiskFull})
		return
	}
	if len(data) > 0 && data[0] == storage.TagUser {
		n, err := storage.UserOffsets(data)
		if err != nil {
			c.emit(Complete{Group: group, ID: id, Err: err})
			return
		}
		offsets = n
	}
	c.propose(group, id, &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Data: data}, offsets)
}

// ProposeRecords proposes a user entry of whole v2 batches that the caller
// validated and counted (offsets): the batches are not walked again here.
// data is the entry's (UserData or UserDataIn of the batches).
// The count is checked when the entry is applied, against the offsets the
// storage stamped (group.resolve). It is refused if an earlier proposal
// of its chain failed (Chain).
func (c *Core) ProposeRecords(group uint64, id ProposalID, data []byte, offsets int64, chain Chain) {
	if !c.chains.admit(id, chain) {
		c.emit(Complete{Group: group, ID: id, Err: ErrChainFailed})
		return
	}
	if c.diskFull {
		c.emit(Complete{Group: group, ID: id, Err: ErrDiskFull})
		return
	}
	c.propose(group, id, &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Data: data}, offsets)
}

// ProposeConfChange proposes a membership change.
func (c *Core) ProposeConfChange(group uint64, id ProposalID, cc *raftpb.ConfChangeV2) {
	typ, data, err := raftpb.MarshalConfChange(cc)
	if err != nil {
		c.emit(Complete{Group: group, ID: id, Err: err})
		return
	}
	c.propose(group, id, &raftpb.Entry{Type: typ.Enum(), Data: data}, 0)
}

func (c *Core) propose(group uint64, id ProposalID, e *raftpb.Entry, offsets int64) {
	g, ok := c.groups[group]
	if !ok {
		c.emit(Complete{Group: group, ID: id, Err: ErrUnknownGroup})
		return
	}
	if g.role != raft.StateLeader {
		c.emit(Complete{Group: group, ID: id, Err: ErrNotLeader})
		return
	}
	c.wake(g)
	size := uint64(len(e.GetData()))
	if size > c.cfg.MaxEntryBytes {
		c.emit(Complete{Group: group, ID: id, Err: fmt.Errorf("%w: %d bytes, at most %d", ErrEntryTooLarge, size, c.cfg.MaxEntryBytes)})
		return
	}
	if g.uncommitted+size > c.cfg.MaxUncommittedBytes && g.uncommitted > 0 {
		c.emit(Complete{Group: group, ID: id, Err: ErrBackpressure})
		return
	}
	// Idempotent batches: appended, answered as a retry, or refused.
	if offsets > 0 && c.checkProducers(g, id, e.GetData()[1:]) {
		return
	}
	// Stepped into raft by TakeEffects (or, with sync writes, after the
	// current Ready is persisted).
	g.queued = append(g.queued, queuedProposal{id: id, entry: e, offsets: offsets})
	c.queuing[g.id] = struct{}{}
	g.uncommitted += size
}

// maxAppendsInFlight bounds a group's appends written but not yet durable.
// Proposals arriving meanwhile wait and go together into the next append:
// under load that makes batches grow with the disk's latency instead of
// making the disk do many small writes. Replication to followers still
// overlaps the leader's own write.
const maxAppendsInFlight = 2

// proposeQueued steps the group's queued proposals into raft if its disk
// pipeline has room and it is not transferring its leadership.
func (c *Core) proposeQueued(g *group) {
	if len(g.queued) == 0 || g.waiting != nil || g.appending >= maxAppendsInFlight || c.transferring(g) {
		return
	}
	qs := g.queued
	g.queued = nil
	c.proposeNow(g, qs)
}

// transferring reports whether the group's leader is handing its
// leadership over. raft drops proposals meanwhile, and takes them again,
// in the same term, once a transfer it could not finish is abandoned an
// election timeout later: a proposal refused then (NOT_LEADER: not
// written) with a later one of the same connection taken after would
// leave a hole in the connection's writes, where a failed produce must
// fail every later one (simulator seed 6290, the balancer moving a
// leader; TestProposalsWaitForATransfer). So proposals wait for the
// transfer's end in the queue: stepped in order if the leader stays, all
// refused if it goes.
func (c *Core) transferring(g *group) bool {
	return g.role == raft.StateLeader && c.raw(g).BasicStatus().LeadTransferee != 0
}

// refuseQueued answers proposals that never went into raft: not the
// leader, not written.
func (c *Core) refuseQueued(g *group, qs []queuedProposal) {
	if len(qs) == 0 {
		return
	}
	c.steppedProducers(g, qs, nil, nil, false)
	for _, q := range qs {
		g.uncommitted -= uint64(len(q.entry.GetData()))
		c.emit(Complete{Group: g.id, ID: q.id, Err: ErrNotLeader})
	}
}

// mergeLimit bounds the entry that small user proposals stepped together
// are merged into. Many proposals in one entry share its per-entry costs
// (record, checksum, index and cache entries, protobuf framing, raft's
// bookkeeping), which dominate for proposals of a few KiB; a proposal this
// big or bigger goes alone, uncopied.
const mergeLimit = 64 << 10

// proposeNow steps proposals into raft and learns their indexes from the
// Ready taken right after: raft appends each accepted entry at the end of
// its log, and nothing else runs in between. Consecutive user proposals
// are merged into one entry up to mergeLimit; each learns its own offsets
// within it.
func (c *Core) proposeNow(g *group, qs []queuedProposal) {
	ents, parts := mergeProposals(qs)
	// One message for all: raft appends them together and sends one
	// append per follower. It takes all or none.
	if err := c.raw(g).Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(c.cfg.ID), Entries: ents}); err != nil {
		c.refuseQueued(g, qs)
		c.drain(g)
		return
	}
	rd := c.raw(g).Ready()
	appended := rd.Entries
	if !c.cfg.SyncWrites {
		appended = nil
		for _, m := range rd.Messages {
			if m.GetTo() == raft.LocalAppendThread {
				appended = m.GetEntries()
			}
		}
	}
	if len(appended) < len(ents) {
		panic(fmt.Sprintf("raftnode: group %d: %d entries proposed but %d appended", g.id, len(ents), len(appended)))
	}
	tail := appended[len(appended)-len(ents):]
	g.stamp.stamp(tail, qs, parts) // before anyone sees them: handleReady hands them out
	c.steppedProducers(g, qs, parts, tail, true)
	for i, q := range qs {
		p := parts[i]
		e := tail[p.entry]
		idx, size := e.GetIndex(), uint64(len(q.entry.GetData()))
		if q.entry.GetType() != raftpb.EntryNormal && e.GetType() == raftpb.EntryNormal {
			// raft replaced the conf change with an empty entry
			g.uncommitted -= size
			c.emit(Complete{Group: g.id, ID: q.id, Index: idx, Err: ErrConfChangeRejected})
			continue
		}
		g.pending[idx] = append(g.pending[idx], pending{id: q.id, term: e.GetTerm(), size: size,
			merged: p.merged, skip: p.skip, offsets: q.offsets})
	}
	c.handleReady(g, rd)
	c.drain(g)
}

// part places a proposal in the entries proposeNow steps into raft.
type part struct {
	entry  int   // index into the proposed entries
	merged bool  // shares the entry with other proposals
	skip   int64 // offsets taken by the proposals before it in the entry
}

// mergeProposals turns queued proposals into entries, merging runs of
// small user proposals (TagUser payloads concatenate: one tag, then every
// proposal's batches in order).
func mergeProposals(qs []queuedProposal) ([]*raftpb.Entry, []part) {
	ents := make([]*raftpb.Entry, 0, len(qs))
	parts := make([]part, len(qs))
	small := func(q queuedProposal) bool {
		return q.offsets > 0 && len(q.entry.GetData()) < mergeLimit
	}
	for i := 0; i < len(qs); {
		j, size := i+1, len(qs[i].entry.GetData())
		if small(qs[i]) {
			for j < len(qs) && small(qs[j]) && size+len(qs[j].entry.GetData())-1 <= mergeLimit {
				size += len(qs[j].entry.GetData()) - 1
				j++
			}
		}
		k := len(ents)
		if j == i+1 {
			ents = append(ents, qs[i].entry)
			parts[i] = part{entry: k}
			i = j
			continue
		}
		data := make([]byte, 1, size)
		data[0] = storage.TagUser
		var skip int64
		for ; i < j; i++ {
			data = append(data, qs[i].entry.GetData()[1:]...)
			parts[i] = part{entry: k, merged: true, skip: skip}
			skip += qs[i].offsets
		}
		ents = append(ents, &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Data: data})
	}
	return ents, parts
}
