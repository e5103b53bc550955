package raftnode

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
)

// An Effect is something the core asks its driver to do. The core never
// does IO itself; drivers carry effects out in the order they were emitted
// (per group), and report completions back as events.
type Effect interface{ effect() }

// Send delivers a Raft message to another server.
type Send struct {
	Group uint64
	Msg   *raftpb.Message
}

// Append asks the group's append worker to write Msg's entries and hard
// state (and install its snapshot), make them durable, and then report
// AppendDone with the same message. Appends of one group are done in order;
// the worker may group-commit appends of many groups and many messages.
type Append struct {
	Group uint64
	Msg   *raftpb.Message
	// Leader is the group's leader when Msg carries a snapshot: the
	// driver copies the snapshot's entries from it (or another replica).
	Leader uint64
}

// Complete reports the end of a proposal: committed and applied at Index
// with the Kafka offsets [BaseOffset, NextOffset), or failed with Err.
// Every proposal gets exactly one Complete, except those still pending when
// the core is shut down (their outcome is unknown to the caller).
type Complete struct {
	Group      uint64
	ID         ProposalID
	Index      uint64
	BaseOffset int64
	NextOffset int64
	Err        error
}

// SaveConfState asks the driver to durably record the group's membership
// as of Index before any later Applied effect of the group is carried out.
// Context is the applied change's context (what the proposer attached).
type SaveConfState struct {
	Group   uint64
	Index   uint64
	Conf    *raftpb.ConfState
	Context []byte
}

// Retain asks the driver to delete the group's head segments below
// BeforeOffset (a committed retention command).
type Retain struct {
	Group        uint64
	Index        uint64
	BeforeOffset int64
}

// SetConfig asks the driver to apply a committed config command to the
// group's log (storage.Log.ApplyConfig): every replica applies the same
// commands in log order.
type SetConfig struct {
	Group uint64
	Index uint64
	Reset bool
	Ops   []storage.ConfigOp
}

// SaveProducers asks the driver to save the group's idempotent-producer
// state (raftnode/producers' snapshot) as of Index, a committed entry,
// before any later Retain of the group is carried out: a restart then
// replays only the log after Index.
type SaveProducers struct {
	Group uint64
	Index uint64
	Data  []byte
}

// Applied reports that the group applied everything up to Index (whose
// entry has term Term); the high watermark (committed and locally durable
// offsets) is HighWatermark. The driver records Index as applied and wakes
// fetches waiting for data. A leader serves reads only once it has applied
// an entry of its own term: before that its high watermark may be behind
// what the previous leader showed.
type Applied struct {
	Group         uint64
	Index         uint64
	Term          uint64
	HighWatermark int64
}

// LeaderChanged reports a change of the group's leader (0: none known) or
// of this server's role in it.
type LeaderChanged struct {
	Group  uint64
	Leader uint64
	Term   uint64
	Role   string
}

func (Send) effect()          {}
func (Append) effect()        {}
func (Complete) effect()      {}
func (SaveConfState) effect() {}
func (Retain) effect()        {}
func (SetConfig) effect()     {}
func (SaveProducers) effect() {}
func (Applied) effect()       {}
func (LeaderChanged) effect() {}

// Describe renders an effect for traces; it is deterministic.
func Describe(e Effect) string {
	switch e := e.(type) {
	case Send:
		return fmt.Sprintf("send g%d %s", e.Group, describeMsg(e.Msg))
	case Append:
		return fmt.Sprintf("append g%d %s", e.Group, describeMsg(e.Msg))
	case Complete:
		return fmt.Sprintf("complete g%d p%d idx=%d off=[%d,%d) err=%v", e.Group, e.ID, e.Index, e.BaseOffset, e.NextOffset, e.Err)
	case SaveConfState:
		return fmt.Sprintf("confstate g%d idx=%d voters=%v learners=%v", e.Group, e.Index, e.Conf.GetVoters(), e.Conf.GetLearners())
	case Retain:
		return fmt.Sprintf("retain g%d idx=%d before=%d", e.Group, e.Index, e.BeforeOffset)
	case SetConfig:
		return fmt.Sprintf("config g%d idx=%d reset=%v ops=%v", e.Group, e.Index, e.Reset, e.Ops)
	case SaveProducers:
		return fmt.Sprintf("save-producers g%d idx=%d bytes=%d", e.Group, e.Index, len(e.Data))
	case Applied:
		return fmt.Sprintf("applied g%d idx=%d term=%d hwm=%d", e.Group, e.Index, e.Term, e.HighWatermark)
	case LeaderChanged:
		return fmt.Sprintf("leader g%d lead=%d term=%d role=%s", e.Group, e.Leader, e.Term, e.Role)
	}
	return fmt.Sprintf("%T", e)
}

func describeMsg(m *raftpb.Message) string {
	s := fmt.Sprintf("%s %d->%d t=%d lt=%d i=%d c=%d n=%d", m.GetType(), m.GetFrom(), m.GetTo(), m.GetTerm(), m.GetLogTerm(), m.GetIndex(), m.GetCommit(), len(m.GetEntries()))
	if m.GetReject() {
		s += " reject"
	}
	if m.Snapshot != nil && m.GetSnapshot().GetMetadata().GetIndex() != 0 {
		s += fmt.Sprintf(" snap=%d", m.GetSnapshot().GetMetadata().GetIndex())
	}
	return s
}
