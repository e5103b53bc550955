package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/raftnode/producers"
	"github.com/vdl-project/vdl/storage"
)

// Idempotent producers (raftnode/producers). Each group keeps the producer
// table of its Raft log, a deterministic function of the log:
//
//   - committed: as of the last applied entry, with the entries' offsets;
//     saved now and then (SaveProducers) so that a restart replays only
//     the log after the save;
//   - head: as of the last entry of the Raft log, committed or not (the
//     committed table plus the tail of entries after it): a new leader's
//     view includes what the old leader appended and it will commit;
//   - an overlay of head with the proposals queued but not yet in the log
//     (leaders only), so that requests pipelined on a connection are in
//     sequence before the ones ahead of them reach the log.
//
// The leader decides on each proposal's idempotent batches when it is
// proposed (propose, below), in proposal order: appended, answered as a
// duplicate (with the original's offsets, once those are committed), or
// refused (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
// UNKNOWN_PRODUCER_ID). Raft's log matching makes the leader's log the
// prefix of every later leader's, so a batch the leader did not find in
// its whole log cannot be in the committed log: no duplicate is ever
// appended (canary.DedupOff skips the check to prove the checks catch it).
// The log is not filtered by anyone else, and the tables never decide
// offsets: replicas that disagreed (a different expiration configured)
// would only decide differently as leaders, never diverge.

// Errors of the producer check: definite (nothing was proposed).
var (
	ErrOutOfOrderSequence = errors.New("raftnode: out of order sequence number")
	ErrProducerEpoch      = errors.New("raftnode: producer epoch older than the producer's")
	ErrUnknownProducer    = errors.New("raftnode: unknown producer id (never seen, or expired) with a sequence other than 0")
	// ErrDuplicateSequence: a retry of a batch that is in the log, whose
	// offsets are not known any more.
	ErrDuplicateSequence = errors.New("raftnode: duplicate sequence number: the batch was written, its offsets are unknown")
	// ErrProducersLoading: the group's producer state is being rebuilt (a
	// snapshot install); retriable.
	ErrProducersLoading = errors.New("raftnode: producer state not loaded yet")
)

// DefaultProducerSaveBytes is Config.ProducerSaveBytes' default.
const DefaultProducerSaveBytes = 64 << 20

// prodState is a group's producer tables.
type prodState struct {
	ready     bool             // false while a snapshot install replaces the log
	committed *producers.Table // through the applied index (or a saved state beyond it)
	head      *producers.Table // through the last entry of the Raft log; nil while not ready
	tail      []tailEntry      // the log's entries after committed.Index, in order
	over      *producers.Table // head plus the queued proposals; nil when none
	dups      map[ProposalID][]dupWait
	// refusals wait for a ReadIndex round (under the proposal's id) to
	// confirm leadership before they are answered (refuseConfirmed).
	refusals map[ProposalID]error

	unsaved uint64 // entry bytes applied since the last save
	scratch []producers.Batch
}

// tailEntry is what the tables need of an entry of the log.
type tailEntry struct {
	index, term uint64
	batches     []producers.Batch
	maxTs       int64
}

// dupWait is a duplicate of a queued proposal, answered with that
// proposal's offsets once it is in the log and committed.
type dupWait struct {
	id             ProposalID
	delta, offsets int64 // what it covers of the proposal's offsets
}

func (c *Core) newTable() *producers.Table { return producers.New(c.cfg.ProducerExpirationMs) }

// entryBatches parses an entry's idempotent batches (none for other
// entries).
func entryBatches(e *raftpb.Entry) tailEntry {
	te := tailEntry{index: e.GetIndex(), term: e.GetTerm()}
	if d := e.GetData(); e.GetType() == raftpb.EntryNormal && len(d) > 1 && d[0] == storage.TagUser {
		te.batches, _, te.maxTs = producers.Parse(d[1:], nil)
	} else {
		te.maxTs = -1 << 63
	}
	return te
}

// loadProducers builds a group's tables from its storage: the saved state,
// then the log after it (entries up to the applied index into the
// committed table, the rest into the tail). Entries deleted before the
// save (retention saves first) are not needed; a log older than the
// feature starts from an empty table at its first entry. A log that cannot
// be read is an error: a table built from part of it would forget
// producers and have their next batches refused (UNKNOWN_PRODUCER_ID), and
// clients then reset their sequences and write again what is written.
func (c *Core) loadProducers(g *group) error {
	p := g.prod
	if p == nil {
		p = &prodState{} // its maps are made when first written: most groups never need them
		g.prod = p
	}
	p.committed, p.head, p.tail, p.over, p.ready = c.newTable(), nil, nil, nil, true
	if idx, data := g.st.ProducerState(); len(data) > 0 {
		t, err := producers.Decode(data, c.cfg.ProducerExpirationMs)
		if err == nil && t.Index == idx {
			p.committed = t
		} else {
			c.cfg.Logger.Errorf("raftnode: group %d: saved producer state at %d unusable, rebuilding from the log: %v", g.id, idx, err)
		}
	}
	first, err1 := g.st.FirstIndex()
	last, err2 := g.st.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("raftnode: group %d: loading the producer state: %w", g.id, err)
	}
	if p.committed.Index+1 < first {
		p.committed.Index = first - 1
	}
	for lo := p.committed.Index + 1; lo <= last; {
		ents, err := g.st.Entries(lo, last+1, 16<<20)
		if err == nil && len(ents) == 0 {
			err = fmt.Errorf("no entries from %d to %d", lo, last)
		}
		if err != nil {
			return fmt.Errorf("raftnode: group %d: loading the producer state: reading entries from %d: %w", g.id, lo, err)
		}
		for _, e := range ents {
			if e.GetIndex() <= g.applied {
				c.applyProducers(g, e, c.entryBase(g, e))
			} else {
				p.tail = append(p.tail, entryBatches(e))
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	p.rebuildHead()
	return nil
}

// entryBase is the base offset of a committed user entry (-1 otherwise).
func (c *Core) entryBase(g *group, e *raftpb.Entry) int64 {
	if d := e.GetData(); len(d) == 0 || d[0] != storage.TagUser {
		return -1
	}
	base, _, err := g.st.EntryOffsets(e.GetIndex())
	if err != nil {
		return -1
	}
	return base
}

// rebuildHead recomputes head from the committed table and the tail.
func (p *prodState) rebuildHead() {
	p.head = p.committed.Clone()
	for _, te := range p.tail {
		p.head.Apply(producers.Where{Index: te.index, Term: te.term, Base: -1}, te.batches, te.maxTs)
	}
	p.over = nil
}

// overlay returns head plus the queued proposals, rebuilt from them when
// head changed since (it is dropped whenever head changes).
func (p *prodState) overlay(g *group) *producers.Table {
	if p.over != nil {
		return p.over
	}
	p.over = p.head.Overlay()
	for _, q := range g.queued {
		if d := q.entry.GetData(); q.offsets > 0 && len(d) > 1 && d[0] == storage.TagUser {
			bs, _, maxTs := producers.Parse(d[1:], nil)
			p.over.Apply(producers.Where{Prop: uint64(q.id), Base: -1}, bs, maxTs)
		}
	}
	return p.over
}

// noteAppend follows the log through an append the core asks for: a
// snapshot replaces the log (the tables wait for the install: installed),
// entries extend it, replacing a conflicting suffix.
func (c *Core) noteAppend(g *group, m *raftpb.Message) {
	p := g.prod
	if idx := m.GetSnapshot().GetMetadata().GetIndex(); idx != 0 {
		p.ready, p.head, p.over = false, nil, nil
		p.tail = p.tail[:0]
		p.committed.Index = max(p.committed.Index, idx) // entries up to it come with the install
	}
	for _, e := range m.GetEntries() {
		p.appendEntry(entryBatches(e))
	}
}

// appendEntry extends the tail (and head) with an entry of the log.
func (p *prodState) appendEntry(te tailEntry) {
	if te.index <= p.committed.Index {
		return
	}
	if n := len(p.tail); n > 0 && te.index <= p.tail[n-1].index {
		k := 0
		if te.index > p.tail[0].index {
			k = int(te.index - p.tail[0].index)
		}
		if p.tail[k].index == te.index && p.tail[k].term == te.term {
			return // already here
		}
		p.tail = p.tail[:k] // a new leader's entries replace ours
		if p.head != nil {
			p.rebuildHead()
		}
	}
	p.tail = append(p.tail, te)
	if p.head != nil {
		p.head.Apply(producers.Where{Index: te.index, Term: te.term, Base: -1}, te.batches, te.maxTs)
		p.over = nil
	}
}

// installed rebuilds the tables once a snapshot install replaced the log:
// from the storage's saved state (the newer of ours and the sender's) and
// the installed entries, then the entries appended after the snapshot.
func (c *Core) installedProducers(g *group) {
	p := g.prod
	tail := slices.Clone(p.tail) // what the core appended since: newer than the storage's
	if err := c.loadProducers(g); err != nil {
		panic(err) // a storage read failed: as raft does (the driver stops the server)
	}
	for _, te := range tail {
		p.appendEntry(te)
	}
}

// applyProducers folds a committed entry into the committed table.
func (c *Core) applyProducers(g *group, e *raftpb.Entry, base int64) {
	p := g.prod
	idx := e.GetIndex()
	var te tailEntry
	found := false
	for len(p.tail) > 0 && p.tail[0].index <= idx {
		if p.tail[0].index == idx && p.tail[0].term == e.GetTerm() {
			te, found = p.tail[0], true
		}
		p.tail = p.tail[1:]
	}
	if idx <= p.committed.Index {
		return
	}
	if !found {
		te = entryBatches(e)
	}
	p.committed.Apply(producers.Where{Index: idx, Term: e.GetTerm(), Base: base}, te.batches, te.maxTs)
	p.unsaved += uint64(len(e.GetData()))
}

// maybeSaveProducers emits the committed table to be saved when enough was
// applied since the last save, or always (force: before a retention that
// may delete the entries a restart would replay). An empty table is saved
// too: it spares a restart the replay of the log before it.
func (c *Core) maybeSaveProducers(g *group, force bool) {
	p := g.prod
	if !p.ready || (!force && p.unsaved < c.cfg.ProducerSaveBytes) {
		return
	}
	p.unsaved = 0
	p.committed.Purge()
	if p.head != nil {
		p.head.Purge()
		p.over = nil
	}
	c.emit(SaveProducers{Group: g.id, Index: p.committed.Index, Data: producers.Encode(p.committed)})
}

// checkProducers decides on a user proposal's idempotent batches (the
// leader, at proposal time). It returns false when the proposal is to be
// queued; true when it was answered (refused, a duplicate of a committed
// batch) or will be (a duplicate of a batch still on its way).
func (c *Core) checkProducers(g *group, id ProposalID, batches []byte) bool {
	p := g.prod
	bs, _, maxTs := producers.Parse(batches, p.scratch[:0])
	p.scratch = bs[:0]
	if len(bs) == 0 {
		if p.over != nil {
			p.over.Clock = max(p.over.Clock, maxTs)
		}
		return false
	}
	if canary.On(canary.DedupOff) {
		return false // broken on purpose: retries are appended again
	}
	if !p.ready {
		c.emit(Complete{Group: g.id, ID: id, Err: ErrProducersLoading})
		return true
	}
	d := p.overlay(g).Propose(uint64(id), bs, maxTs)
	b := d.Batch
	var err error
	switch d.Verdict {
	case producers.Append:
		return false
	case producers.Duplicate:
		c.answerDuplicate(g, id, d)
		return true
	case producers.OutOfOrder:
		err = ErrOutOfOrderSequence
	case producers.StaleEpoch:
		err = ErrProducerEpoch
	default:
		err = ErrUnknownProducer
	}
	c.refuseConfirmed(g, id, fmt.Errorf("%w: producer %d epoch %d sequence %d", err, b.ID, b.Epoch, b.FirstSeq))
	return true
}

// refuseConfirmed answers a refusal only once a ReadIndex round confirmed
// that this server still leads (else NOT_LEADER, retriable). A deposed
// leader that does not know it yet decides against a log that lacks what
// the new leader committed: its "out of order" would make the client reset
// its sequences (KIP-360) and write again what is already written. A
// leader confirmed after the decision held every committed entry when it
// decided. (Appends need no such round: a deposed leader's entries never
// commit; duplicates of committed batches are true wherever they are
// found.)
func (c *Core) refuseConfirmed(g *group, id ProposalID, err error) {
	if g.role != raft.StateLeader {
		c.emit(Complete{Group: g.id, ID: id, Err: ErrNotLeader})
		return
	}
	if g.prod.refusals == nil {
		g.prod.refusals = map[ProposalID]error{}
	}
	g.prod.refusals[id] = err
	var ctx [8]byte
	binary.BigEndian.PutUint64(ctx[:], uint64(id))
	g.reads = append(g.reads, id)
	c.raw(g).ReadIndex(ctx[:])
	c.drain(g) // the round's heartbeats go out now
}

// readAnswered completes a ReadIndex request: a confirmed refusal, or a
// read fence's index.
func (c *Core) readAnswered(g *group, id ProposalID, index uint64) {
	if err, ok := g.prod.refusals[id]; ok {
		delete(g.prod.refusals, id)
		c.emit(Complete{Group: g.id, ID: id, Err: err})
		return
	}
	c.emit(Complete{Group: g.id, ID: id, Index: index})
}

// readFailed completes a ReadIndex request that raft dropped.
func (c *Core) readFailed(g *group, id ProposalID, err error) {
	delete(g.prod.refusals, id)
	c.emit(Complete{Group: g.id, ID: id, Err: err})
}

// answerDuplicate answers a retry with its original's offsets: at once if
// they are committed, else when the original's entry applies (or fails).
func (c *Core) answerDuplicate(g *group, id ProposalID, d producers.Decision) {
	first := d.First
	offsets := d.Last.Delta + int64(d.Last.Count) - first.Delta
	switch {
	case first.Prop != 0:
		orig := ProposalID(first.Prop)
		if g.prod.dups == nil {
			g.prod.dups = map[ProposalID][]dupWait{}
		}
		g.prod.dups[orig] = append(g.prod.dups[orig], dupWait{id: id, delta: first.Delta, offsets: offsets})
	case first.Offset >= 0:
		c.emit(Complete{Group: g.id, ID: id, Index: first.Index, BaseOffset: first.Offset, NextOffset: first.Offset + offsets})
	case first.Index <= g.applied:
		base := c.committedOffset(g, d.Batch.ID, first)
		if base < 0 {
			// Written, but where is not known any more (it cannot happen:
			// the committed table keeps its last batches' offsets): Kafka's
			// answer for a retry it cannot place, which clients take as
			// success without an offset.
			c.emit(Complete{Group: g.id, ID: id, Err: fmt.Errorf("%w: producer %d sequence %d", ErrDuplicateSequence, d.Batch.ID, first.FirstSeq)})
			return
		}
		c.emit(Complete{Group: g.id, ID: id, Index: first.Index, BaseOffset: base, NextOffset: base + offsets})
	default:
		g.pending[first.Index] = append(g.pending[first.Index], pending{id: id, term: first.Term, merged: true,
			dedup: true, skip: first.Delta, offsets: offsets})
	}
}

// committedOffset finds the base offset of a committed batch.
func (c *Core) committedOffset(g *group, pid int64, l producers.Loc) int64 {
	if pr := g.prod.committed.Get(pid); pr != nil {
		for _, b := range pr.Batches {
			if b.Index == l.Index && b.FirstSeq == l.FirstSeq && b.Offset >= 0 {
				return b.Offset
			}
		}
	}
	if base, _, err := g.st.EntryOffsets(l.Index); err == nil {
		return base + l.Delta
	}
	return -1
}

// steppedProducers: the queued proposals qs went into the log (ok) or
// were refused; the overlay is done with, and the duplicates waiting on
// them now wait on their entries (or fail with them).
func (c *Core) steppedProducers(g *group, qs []queuedProposal, parts []part, ents []*raftpb.Entry, ok bool) {
	p := g.prod
	p.over = nil
	if len(p.dups) == 0 {
		return
	}
	for i, q := range qs {
		ws := p.dups[q.id]
		if len(ws) == 0 {
			continue
		}
		delete(p.dups, q.id)
		for _, w := range ws {
			if !ok {
				c.emit(Complete{Group: g.id, ID: w.id, Err: ErrNotLeader})
				continue
			}
			e := ents[parts[i].entry]
			g.pending[e.GetIndex()] = append(g.pending[e.GetIndex()], pending{id: w.id, term: e.GetTerm(), merged: true,
				dedup: true, skip: parts[i].skip + w.delta, offsets: w.offsets})
		}
	}
}

// failDuplicates fails the duplicates waiting on queued proposals (the
// group is being removed or shut down).
func (p *prodState) failDuplicates(c *Core, g *group, err error) {
	p.over = nil
	ids := make([]ProposalID, 0, len(p.dups))
	for id := range p.dups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, orig := range ids {
		for _, w := range p.dups[orig] {
			c.emit(Complete{Group: g.id, ID: w.id, Err: err})
		}
	}
	clear(p.dups)
}

// Producers returns the group's committed producer table, encoded
// (producers.Encode: equal tables, equal bytes) and as of which index.
func (c *Core) Producers(group uint64) ([]byte, uint64, bool) {
	g, ok := c.groups[group]
	if !ok || g.prod == nil || !g.prod.ready {
		return nil, 0, false
	}
	return producers.Encode(g.prod.committed), g.prod.committed.Index, true
}
