// Package raftnode runs VDL's Raft groups. The Core is deterministic: it
// takes events (ticks, peer messages, proposals, completed appends) and
// returns effects (sends, appends, completions). It never starts goroutines,
// reads a clock, does IO or draws global randomness, and it never depends on
// map iteration order, so the simulator can replay a whole cluster from a
// seed. Drivers (production and test) carry the effects out.
//
// The only reads the core makes are of its groups' storage (raft.Storage and
// the offset lookups), which is state the driver changes only through Append
// effects the core asked for.
package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/storage"
)

// ProposalID names a proposal; the driver chooses it and gets it back in
// exactly one Complete effect.
type ProposalID uint64

// Proposal failures. ErrNotLeader, ErrBackpressure and ErrShutdown are
// definite (the proposal was not and will not be committed); ErrOverwritten
// is definite too: the entry was replaced by a new leader's log.
var (
	ErrNotLeader    = errors.New("raftnode: not the leader")
	ErrBackpressure = errors.New("raftnode: too many uncommitted bytes, retry later")
	ErrOverwritten  = errors.New("raftnode: proposal overwritten by a new leader")
	ErrUnknownGroup = errors.New("raftnode: unknown group")
	ErrGroupExists  = errors.New("raftnode: group already exists")
	ErrShutdown     = errors.New("raftnode: group removed")
	// ErrUnknownOutcome: the log was replaced by a snapshot before the
	// proposal's entry was applied here; it may or may not be committed.
	ErrUnknownOutcome = errors.New("raftnode: outcome unknown: log replaced by a snapshot")
	// ErrConfChangeRejected: raft refused a membership change because
	// another one is still pending (or the change was not valid now).
	ErrConfChangeRejected = errors.New("raftnode: membership change rejected: another change is pending")
	// ErrEntryTooLarge: a proposal larger than Config.MaxEntryBytes (definite:
	// not proposed).
	ErrEntryTooLarge = errors.New("raftnode: proposal larger than the maximum entry size")
	// ErrDiskFull: the server is short of disk space and takes no new user
	// data until space is freed (definite: not proposed; retriable).
	ErrDiskFull = errors.New("raftnode: disk full: no new data is accepted until retention frees space")
)

// Storage is what the core reads of a group's log. *storage.Log satisfies it.
type Storage interface {
	raft.Storage
	// Applied is the last applied index made durable before a restart.
	Applied() uint64
	// EntryOffsets returns the Kafka offsets taken by the entry at index.
	EntryOffsets(index uint64) (base, next int64, err error)
	// NextOffsetAt returns the offset after all records up to index.
	NextOffsetAt(index uint64) (int64, error)
}

// Config configures a Core. Zero values get sensible defaults.
type Config struct {
	ID            uint64 // this server's node id, the same in every group
	ElectionTick  int    // default 10
	HeartbeatTick int    // default 1
	// MaxSizePerMsg bounds an append message (default 1 MiB).
	MaxSizePerMsg uint64
	// MaxEntryBytes bounds one Raft entry's data (default
	// DefaultMaxEntryBytes); larger proposals fail with ErrEntryTooLarge.
	// The peer transport's frame limit is derived from it (MaxFrameBytes):
	// an entry that could not be sent to a follower is never proposed.
	MaxEntryBytes uint64
	// MaxInflightMsgs and MaxInflightBytes bound unacknowledged appends per
	// follower (defaults 256 and 32 MiB).
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds a group's proposed-but-not-applied bytes;
	// beyond it proposals fail fast with ErrBackpressure (default 64 MiB).
	MaxUncommittedBytes uint64
	// SyncWrites turns raft's asynchronous storage writes off: each Ready
	// is persisted before its messages are sent and the next one is taken.
	// It exists to measure what the pipeline buys.
	SyncWrites bool
	Logger     raft.Logger
}

// DefaultMaxEntryBytes is the default Config.MaxEntryBytes.
const DefaultMaxEntryBytes = 8 << 20

// MaxFrameBytes is the peer transport frame that carries any append
// message of a core configured with maxEntry and maxPerMsg (0: defaults):
// raft sends one entry alone or entries up to MaxSizePerMsg together, and a
// frame adds the message's own fields.
func MaxFrameBytes(maxEntry, maxPerMsg uint64) int {
	if maxEntry == 0 {
		maxEntry = DefaultMaxEntryBytes
	}
	if maxPerMsg == 0 {
		maxPerMsg = 1 << 20
	}
	return int(max(maxEntry, maxPerMsg) + 1<<20)
}

func (c *Config) defaults() {
	if c.ElectionTick == 0 {
		c.ElectionTick = 10
	}
	if c.HeartbeatTick == 0 {
		c.HeartbeatTick = 1
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = 32 << 20
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = quietLogger{}
	}
}

// Core owns every Raft group of one server.
type Core struct {
	cfg      Config
	diskFull bool // refuse user proposals (SetDiskFull)
	groups   map[uint64]*group
	ids      []uint64 // sorted group ids: iteration order never comes from the map
	effects  []Effect
}

// NewCore returns a core with no groups.
func NewCore(cfg Config) *Core {
	cfg.defaults()
	return &Core{cfg: cfg, groups: map[uint64]*group{}}
}

// ID returns this server's node id.
func (c *Core) ID() uint64 { return c.cfg.ID }

// SetDiskFull makes the core refuse user proposals (ErrDiskFull) while the
// server is short of disk space; commands (retention) and membership
// changes go on.
func (c *Core) SetDiskFull(full bool) { c.diskFull = full }

// TakeEffects proposes what was submitted since the last call and returns
// the effects emitted since then, in order. Proposals are stepped into raft
// here, a group's at once, so many proposals become one append and one
// message per follower.
func (c *Core) TakeEffects() []Effect {
	for _, id := range c.ids {
		c.proposeQueued(c.groups[id])
	}
	e := c.effects
	c.effects = nil
	return e
}

func (c *Core) emit(e Effect) { c.effects = append(c.effects, e) }

// Groups returns the ids of the hosted groups, sorted.
func (c *Core) Groups() []uint64 { return slices.Clone(c.ids) }

// AddGroup starts hosting a group whose log is st. A new group's storage
// must have been bootstrapped with its initial membership.
func (c *Core) AddGroup(id uint64, st Storage) error {
	if _, ok := c.groups[id]; ok {
		return fmt.Errorf("%w: %d", ErrGroupExists, id)
	}
	applied := st.Applied()
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        c.cfg.ID,
		ElectionTick:              c.cfg.ElectionTick,
		HeartbeatTick:             c.cfg.HeartbeatTick,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             c.cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  4 * c.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           c.cfg.MaxInflightMsgs,
		MaxInflightBytes:          c.cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		AsyncStorageWrites:        !c.cfg.SyncWrites,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    c.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("raftnode: group %d: %w", id, err)
	}
	hwm, err := st.NextOffsetAt(applied)
	if err != nil {
		hwm = 0
	}
	g := &group{id: id, rn: rn, st: st, applied: applied, hwm: hwm, pending: map[uint64][]pending{}}
	c.groups[id] = g
	c.ids = append(c.ids, id)
	slices.Sort(c.ids)
	c.drain(g)
	return nil
}

// RemoveGroup stops hosting a group. Its pending proposals fail with
// ErrShutdown (they may still commit elsewhere: callers treat it as unknown).
func (c *Core) RemoveGroup(id uint64) {
	g, ok := c.groups[id]
	if !ok {
		return
	}
	g.failAll(c, ErrShutdown)
	delete(c.groups, id)
	c.ids = slices.DeleteFunc(c.ids, func(x uint64) bool { return x == id })
	// Its storage effects not taken yet belong to the raft that is gone.
	c.effects = slices.DeleteFunc(c.effects, func(e Effect) bool {
		eg, ok := EffectGroup(e)
		return ok && eg == id
	})
}

// Tick advances every group's logical clock by one tick.
func (c *Core) Tick() {
	for _, id := range c.ids {
		g := c.groups[id]
		g.ticks++
		g.rn.Tick()
		c.drain(g)
	}
}

// Step delivers a message from a peer.
func (c *Core) Step(group uint64, m *raftpb.Message) {
	g, ok := c.groups[group]
	if !ok {
		return
	}
	if raft.IsLocalMsg(m.GetType()) {
		return // never from the network
	}
	if g.heard == nil {
		g.heard = map[uint64]uint64{}
	}
	g.heard[m.GetFrom()] = g.ticks
	_ = g.rn.Step(m) // peer-not-found and stale messages are dropped, as raft intends
	c.drain(g)
}

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
	size := uint64(len(e.GetData()))
	if size > c.cfg.MaxEntryBytes {
		c.emit(Complete{Group: group, ID: id, Err: fmt.Errorf("%w: %d bytes, at most %d", ErrEntryTooLarge, size, c.cfg.MaxEntryBytes)})
		return
	}
	if g.uncommitted+size > c.cfg.MaxUncommittedBytes && g.uncommitted > 0 {
		c.emit(Complete{Group: group, ID: id, Err: ErrBackpressure})
		return
	}
	// Stepped into raft by TakeEffects (or, with sync writes, after the
	// current Ready is persisted).
	g.queued = append(g.queued, queuedProposal{id: id, entry: e, offsets: offsets})
	g.uncommitted += size
}

// maxAppendsInFlight bounds a group's appends written but not yet durable.
// Proposals arriving meanwhile wait and go together into the next append:
// under load that makes batches grow with the disk's latency instead of
// making the disk do many small writes. Replication to followers still
// overlaps the leader's own write.
const maxAppendsInFlight = 2

// proposeQueued steps the group's queued proposals into raft if its disk
// pipeline has room.
func (c *Core) proposeQueued(g *group) {
	if len(g.queued) == 0 || g.waiting != nil || g.appending >= maxAppendsInFlight {
		return
	}
	qs := g.queued
	g.queued = nil
	c.proposeNow(g, qs)
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
	if err := g.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(c.cfg.ID), Entries: ents}); err != nil {
		for _, q := range qs {
			g.uncommitted -= uint64(len(q.entry.GetData()))
			c.emit(Complete{Group: g.id, ID: q.id, Err: ErrNotLeader})
		}
		c.drain(g)
		return
	}
	rd := g.rn.Ready()
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

// ReadIndex asks the group's leader to confirm it still leads (a heartbeat
// round with a quorum). The result is a Complete with the same id whose
// Index is the read index: once the group has applied it, a read of the
// local state is linearizable. Fails with ErrNotLeader on a follower or
// when leadership changes first.
func (c *Core) ReadIndex(group uint64, id ProposalID) {
	g, ok := c.groups[group]
	if !ok {
		c.emit(Complete{Group: group, ID: id, Err: ErrUnknownGroup})
		return
	}
	if g.role != raft.StateLeader {
		c.emit(Complete{Group: group, ID: id, Err: ErrNotLeader})
		return
	}
	var ctx [8]byte
	binary.BigEndian.PutUint64(ctx[:], uint64(id))
	g.reads = append(g.reads, id)
	g.rn.ReadIndex(ctx[:])
	c.drain(g)
}

// TransferLeader asks the group's leader to hand leadership to peer to.
func (c *Core) TransferLeader(group, to uint64) {
	if g, ok := c.groups[group]; ok {
		g.rn.TransferLeader(to)
		c.drain(g)
	}
}

// Campaign makes this server start an election in the group now.
func (c *Core) Campaign(group uint64) {
	if g, ok := c.groups[group]; ok {
		_ = g.rn.Campaign()
		c.drain(g)
	}
}

// ReportUnreachable tells raft a message to peer could not be delivered.
func (c *Core) ReportUnreachable(group, peer uint64) {
	if g, ok := c.groups[group]; ok {
		g.rn.ReportUnreachable(peer)
		c.drain(g)
	}
}

// ReportSnapshot tells raft whether sending a snapshot to peer succeeded.
func (c *Core) ReportSnapshot(group, peer uint64, ok bool) {
	if g, found := c.groups[group]; found {
		st := raft.SnapshotFinish
		if !ok {
			st = raft.SnapshotFailure
		}
		g.rn.ReportSnapshot(peer, st)
		c.drain(g)
	}
}

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
		g.rn.Advance(*rd)
		if len(g.queued) > 0 {
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
			_ = g.rn.Step(r)
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
	if hwm, err := g.st.NextOffsetAt(g.applied); err == nil {
		g.hwm = hwm
	}
	c.emit(Applied{Group: g.id, Index: g.applied, Term: g.appliedTerm, HighWatermark: g.hwm})
}

// drain handles every Ready the group has.
func (c *Core) drain(g *group) {
	for g.waiting == nil && g.rn.HasReady() {
		c.handleReady(g, g.rn.Ready())
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
			c.emit(Complete{Group: g.id, ID: id, Index: rs.Index})
		}
	}
	if c.cfg.SyncWrites {
		c.handleSyncReady(g, rd)
		return
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			g.appending++
			c.emit(Append{Group: g.id, Msg: m, Leader: g.lead})
		case raft.LocalApplyThread:
			c.apply(g, m.GetEntries())
			for _, r := range m.GetResponses() {
				_ = g.rn.Step(r)
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
		g.rn.Advance(rd)
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
	c.emit(Append{Group: g.id, Msg: m, Leader: g.lead})
}

func (c *Core) sendAll(g *group, msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetTo() == c.cfg.ID {
			_ = g.rn.Step(m)
			continue
		}
		c.emit(Send{Group: g.id, Msg: m})
	}
}

func (c *Core) noteSoftState(g *group, ss *raft.SoftState) {
	if ss.RaftState != raft.StateLeader {
		// raft drops pending read requests when leadership goes; say so.
		for _, id := range g.reads {
			c.emit(Complete{Group: g.id, ID: id, Err: ErrNotLeader})
		}
		g.reads = nil
	}
	g.role = ss.RaftState
	g.lead = ss.Lead
	c.emit(LeaderChanged{Group: g.id, Leader: ss.Lead, Term: g.rn.BasicStatus().GetTerm(), Role: ss.RaftState.String()})
}

// Shutdown ends every group: each pending proposal and read completes with
// err, and the core hosts nothing. It returns the completions not yet taken
// (those emitted before, then the failures in group and index order); the
// other effects not yet taken are dropped.
func (c *Core) Shutdown(err error) []Complete {
	for _, id := range c.ids {
		c.groups[id].failAll(c, err)
	}
	var out []Complete
	for _, e := range c.effects {
		if cm, ok := e.(Complete); ok {
			out = append(out, cm)
		}
	}
	c.effects = nil
	c.groups, c.ids = map[uint64]*group{}, nil
	return out
}

// members returns the group's voters and learners, sorted.
func (c *Core) members(group uint64) []uint64 {
	g, ok := c.groups[group]
	if !ok {
		return nil
	}
	cfg := g.rn.Status().Config
	var ids []uint64
	for id := range cfg.Voters.IDs() {
		ids = append(ids, id)
	}
	for id := range cfg.Learners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
