package server

import (
	"errors"
	"fmt"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// Replication is the replication engine a Backend serves from: the
// production *raftnode.Host, or the simulator's driver of the same
// raftnode.Node.
type Replication interface {
	ID() uint64
	View(group uint64) (raftnode.View, bool)
	// HighWatermark is the view's high watermark and a channel closed at
	// the group's next change that concerns readers.
	HighWatermark(group uint64) (int64, <-chan struct{}, bool)
	Status(group uint64) (raftnode.GroupStatus, bool)
	ProposeFunc(group uint64, data []byte, done func(raftnode.Result, error)) error
	Fence(group uint64) *raftnode.Fence
	// FailStop stops the server for a failure found outside the engine
	// (corruption found by a read).
	FailStop(err error)
}

// Catalog is the streams and brokers a server knows.
type Catalog interface {
	Brokers() []kafka.Broker
	Streams() []string // sorted
	Stream(name string) (StreamRef, bool)
}

// StreamRef is one stream of the catalog.
type StreamRef struct {
	Group    uint64
	Replicas []uint64
	Log      *storage.Log // nil when the stream is not hosted here
}

// Backend is the Kafka front end's view of a server (kafka.Backend):
// streams are Raft groups of the replication engine; reads come from the
// local storage logs, only on the leader, only up to the high watermark.
type Backend struct {
	r Replication
	c Catalog
}

var _ kafka.Backend = (*Backend)(nil)

// NewBackend returns the backend of the server whose engine is r.
func NewBackend(r Replication, c Catalog) *Backend { return &Backend{r: r, c: c} }

// Brokers lists the advertised brokers.
func (b *Backend) Brokers() []kafka.Broker { return b.c.Brokers() }

// Controller reports the lowest broker id: VDL has no Kafka controller;
// clients only need a stable, valid broker id here.
func (b *Backend) Controller() int32 {
	id := int32(-1)
	for _, br := range b.c.Brokers() {
		if id == -1 || br.NodeID < id {
			id = br.NodeID
		}
	}
	return id
}

// HasStream reports whether the stream exists.
func (b *Backend) HasStream(name string) bool {
	_, ok := b.c.Stream(name)
	return ok
}

// Streams lists the streams, sorted.
func (b *Backend) Streams() []string { return b.c.Streams() }

// Stream reports a stream's leader, replicas and in-sync replicas. A
// leader that may not serve reads yet is reported as no leader
// (LEADER_NOT_AVAILABLE), so clients wait rather than fail.
func (b *Backend) Stream(name string) (kafka.StreamInfo, bool) {
	ref, ok := b.c.Stream(name)
	if !ok {
		return kafka.StreamInfo{}, false
	}
	info := kafka.StreamInfo{Leader: -1, Replicas: ids32(ref.Replicas), ISR: ids32(ref.Replicas)}
	v, hosted := b.r.View(ref.Group)
	if ref.Log == nil || !hosted {
		return info, true
	}
	if v.Leader != 0 {
		info.Leader = int32(v.Leader)
	}
	if v.Leader == b.r.ID() {
		info.Local = v.Readable(b.r.ID())
		if !info.Local {
			info.Leader = -1 // elected but not serving yet: LEADER_NOT_AVAILABLE
		} else if gs, ok := b.r.Status(ref.Group); ok {
			info.ISR = ids32(gs.InSync)
		}
	}
	return info, true
}

// Produce proposes the batches in the stream's group.
func (b *Backend) Produce(name string, records []byte, done func(int64, error)) {
	ref, ok := b.c.Stream(name)
	if !ok || ref.Log == nil {
		done(0, kafka.ErrUnknownStream)
		return
	}
	err := b.r.ProposeFunc(ref.Group, raftnode.UserData(records), func(r raftnode.Result, err error) {
		done(r.BaseOffset, err)
	})
	if err != nil {
		done(0, err)
	}
}

// Retain proposes the stream's retention below before (a replicated
// command), refusing a before above the high watermark; the apply bounds
// it by the commit at its own position in the log too.
func (b *Backend) Retain(name string, before int64, done func(error)) {
	ref, ok := b.c.Stream(name)
	if !ok || ref.Log == nil {
		done(kafka.ErrUnknownStream)
		return
	}
	if hwm, _, _ := b.r.HighWatermark(ref.Group); before > hwm && !canary.On(canary.RetainAboveCommit) {
		done(fmt.Errorf("%w: before %d, high watermark %d", kafka.ErrRetainAboveHWM, before, hwm))
		return
	}
	if err := b.r.ProposeFunc(ref.Group, raftnode.RetainData(before), func(_ raftnode.Result, err error) { done(err) }); err != nil {
		done(err)
	}
}

// Log returns the read view of a stream this server leads and may serve.
func (b *Backend) Log(name string) (kafka.LogView, error) {
	ref, ok := b.c.Stream(name)
	switch {
	case !ok:
		return nil, kafka.ErrUnknownStream
	case ref.Log == nil:
		return nil, kafka.ErrNotLeader // hosted elsewhere
	}
	v, _ := b.r.View(ref.Group)
	if canary.On(canary.FollowerServesFetch) && v.Leader != 0 {
		return logView{b: b, group: ref.Group, log: ref.Log}, nil // broken on purpose
	}
	switch {
	case v.Leader == 0:
		return nil, kafka.ErrNoLeader
	case v.Leader != b.r.ID():
		return nil, kafka.ErrNotLeader
	case !v.Readable(b.r.ID()):
		return nil, kafka.ErrNoLeader
	}
	return logView{b: b, group: ref.Group, log: ref.Log}, nil
}

// logView serves reads of a stream this server leads.
type logView struct {
	b     *Backend
	group uint64
	log   *storage.Log
}

func (v logView) StartOffset() int64 { return v.log.StartOffset() }
func (v logView) EndOffset() int64   { return v.log.EndOffset() }

func (v logView) HighWatermark() int64 {
	if canary.On(canary.ReadAboveHWM) {
		return v.log.EndOffset() // broken on purpose: uncommitted records are visible
	}
	hwm, _, _ := v.b.r.HighWatermark(v.group)
	return hwm
}

// Read reads committed batches. Corruption found on the way is never
// served: the server stops (a replica that cannot trust its disk must be
// replaced).
func (v logView) Read(offset, hwm int64, maxBytes int) ([]storage.Batch, error) {
	bs, err := v.log.Read(offset, hwm, maxBytes)
	if err != nil && errors.Is(err, storage.ErrCorrupt) {
		v.b.r.FailStop(err)
	}
	return bs, err
}

// OffsetForTime finds the first batch whose max timestamp reaches ts and
// reports that batch's max timestamp (VDL's time index is per batch).
func (v logView) OffsetForTime(ts int64) (int64, int64, error) {
	hwm := v.HighWatermark()
	off, err := v.log.OffsetForTime(ts)
	if err != nil {
		return -1, -1, err
	}
	if off >= hwm {
		return -1, -1, nil
	}
	bs, err := v.Read(off, hwm, 1)
	if err != nil {
		if errors.Is(err, storage.ErrOutOfRange) {
			return -1, -1, nil
		}
		return -1, -1, err
	}
	if len(bs) == 0 || len(bs[0].Data) < 43 {
		return off, -1, nil
	}
	return off, maxTimestamp(bs[0].Data), nil
}

func (v logView) Fence() kafka.ReadFence {
	if canary.On(canary.NoReadFence) {
		f := raftnode.NewFence() // broken on purpose: leadership is not confirmed
		f.Finish(nil)
		return f
	}
	if canary.On(canary.FollowerServesFetch) {
		if view, _ := v.b.r.View(v.group); view.Leader != v.b.r.ID() {
			f := raftnode.NewFence() // broken on purpose: a follower confirms nothing
			f.Finish(nil)
			return f
		}
	}
	return v.b.r.Fence(v.group)
}

func (v logView) Changed() <-chan struct{} {
	_, ch, ok := v.b.r.HighWatermark(v.group)
	if !ok {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return ch
}

func maxTimestamp(batch []byte) int64 {
	var ts int64
	for _, b := range batch[35:43] {
		ts = ts<<8 | int64(b)
	}
	return ts
}

func ids32(ids []uint64) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
