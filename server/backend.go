package server

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
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
	ProposeRecordsFunc(group uint64, data []byte, offsets int64, chain raftnode.Chain, done func(raftnode.Result, error)) error
	EndChain(chain raftnode.Chain)
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
	// LeaderHint is the leader the config servers last heard of, for a
	// stream not hosted here (0: unknown).
	LeaderHint uint64
	traffic    *streamTraffic
	floor      *atomic.Int64 // committed retention point not yet applied by storage; nil: none kept
	Defaults   StreamConfig  // the stream's configured (TOML) settings: its configs' defaults
}

// startOffset is the log start readers see: the storage's, or a retention
// point committed but not yet applied to it.
func (ref StreamRef) startOffset() int64 {
	start := ref.Log.StartOffset()
	if ref.floor != nil {
		start = max(start, ref.floor.Load())
	}
	return start
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
	info := kafka.StreamInfo{Leader: -1, Replicas: ids32(ref.Replicas), ISR: ids32(ref.Replicas), LeaderEpoch: -1}
	v, hosted := b.r.View(ref.Group)
	if ref.Log == nil || !hosted {
		if ref.LeaderHint != 0 {
			info.Leader = int32(ref.LeaderHint)
		}
		return info, true
	}
	if v.Term != 0 {
		info.LeaderEpoch = batchfmt.EpochOfTerm(v.Term)
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
func (b *Backend) Produce(name string, records kafka.Records, done func(kafka.Produced, error)) {
	failed := kafka.Produced{Base: -1, LogStart: -1}
	ref, ok := b.c.Stream(name)
	if !ok || ref.Log == nil {
		done(failed, kafka.ErrUnknownStream)
		return
	}
	if err := checkMaxMessage(ref.Log, records.Batches); err != nil {
		done(failed, err)
		return
	}
	data := records.Room // the request's memory: no copy before raft's own
	if data != nil {
		data = raftnode.UserDataIn(data)
	} else {
		data = raftnode.UserData(records.Batches)
	}
	err := b.r.ProposeRecordsFunc(ref.Group, data, records.Offsets, raftnode.Chain(records.Chain), func(r raftnode.Result, err error) {
		if err != nil {
			done(failed, kafkaError(err))
			return
		}
		ref.traffic.produced(records)
		done(kafka.Produced{Base: r.BaseOffset, LogStart: ref.startOffset()}, nil)
	})
	if err != nil {
		done(failed, kafkaError(err))
	}
}

// EndChain forgets a connection's produce chain (kafka.Records.Chain).
func (b *Backend) EndChain(chain uint64) { b.r.EndChain(raftnode.Chain(chain)) }

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
	propose := b.r.ProposeFunc(ref.Group, raftnode.RetainData(before), func(_ raftnode.Result, err error) {
		if err == nil && ref.floor != nil {
			// Committed (and bounded by the high watermark, which only
			// grows, so the apply keeps before as it is): readers move to
			// it now; storage deletes the segments when its pipeline
			// reaches the command.
			for cur := ref.floor.Load(); before > cur && !ref.floor.CompareAndSwap(cur, before); cur = ref.floor.Load() {
			}
		}
		done(kafkaError(err))
	})
	if propose != nil {
		done(kafkaError(propose))
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
		return logView{b: b, group: ref.Group, log: ref.Log, traffic: ref.traffic, ref: ref}, nil // broken on purpose
	}
	switch {
	case v.Leader == 0:
		return nil, kafka.ErrNoLeader
	case v.Leader != b.r.ID():
		return nil, kafka.ErrNotLeader
	case !v.Readable(b.r.ID()):
		return nil, kafka.ErrNoLeader
	}
	return logView{b: b, group: ref.Group, log: ref.Log, traffic: ref.traffic, ref: ref}, nil
}

// logView serves reads of a stream this server leads.
type logView struct {
	b       *Backend
	group   uint64
	log     *storage.Log
	traffic *streamTraffic
	ref     StreamRef
}

func (v logView) StartOffset() int64 { return v.ref.startOffset() }
func (v logView) EndOffset() int64   { return v.log.EndOffset() }

func (v logView) HighWatermark() int64 {
	if canary.On(canary.ReadAboveHWM) {
		return v.log.EndOffset() // broken on purpose: uncommitted records are visible
	}
	hwm, _, _ := v.b.r.HighWatermark(v.group)
	return hwm
}

// Read reads committed batches for a Fetch (counted as fetched).
func (v logView) Read(offset, hwm int64, maxBytes int) ([]storage.Batch, error) {
	bs, err := v.read(offset, hwm, maxBytes)
	if v.traffic != nil {
		for _, b := range bs {
			v.traffic.fetched(len(b.Data), b.NextOffset-b.BaseOffset)
		}
	}
	return bs, err
}

// ReadPooled is Read into pooled memory (kafka.PooledReader): the front
// end releases it once the response is written.
func (v logView) ReadPooled(offset, hwm int64, maxBytes int) ([]storage.Batch, kafka.Releaser, error) {
	bs, rb, err := v.log.ReadPooled(offset, hwm, maxBytes)
	if err != nil && errors.Is(err, storage.ErrCorrupt) {
		v.b.r.FailStop(err)
	}
	if v.traffic != nil {
		for _, b := range bs {
			v.traffic.fetched(len(b.Data), b.NextOffset-b.BaseOffset)
		}
	}
	if rb == nil {
		return bs, nil, kafkaError(err)
	}
	return bs, rb, kafkaError(err)
}

// read reads committed batches. Corruption found on the way is never
// served: the server stops (a replica that cannot trust its disk must be
// replaced).
func (v logView) read(offset, hwm int64, maxBytes int) ([]storage.Batch, error) {
	bs, err := v.log.Read(offset, hwm, maxBytes)
	if err != nil && errors.Is(err, storage.ErrCorrupt) {
		v.b.r.FailStop(err)
	}
	return bs, kafkaError(err)
}

// OffsetForTime finds the first batch whose max timestamp reaches ts and
// reports that batch's max timestamp (VDL's time index is per batch).
func (v logView) OffsetForTime(ts int64) (int64, int64, error) {
	hwm := v.HighWatermark()
	off, err := v.log.OffsetForTime(ts)
	if err != nil {
		return -1, -1, kafkaError(err)
	}
	off = max(off, v.StartOffset())
	if off >= hwm {
		return -1, -1, nil
	}
	bs, err := v.read(off, hwm, 1)
	if err != nil {
		if errors.Is(err, kafka.ErrOutOfRange) {
			return -1, -1, nil
		}
		return -1, -1, err
	}
	if len(bs) == 0 || len(bs[0].Data) < batchfmt.OffMaxTimestamp+8 {
		return off, -1, nil
	}
	return off, batchfmt.MaxTimestamp(bs[0].Data), nil
}

// LeaderEpoch is the group's Raft term (docs/kafka.md "Leader epochs").
func (v logView) LeaderEpoch() int32 {
	view, _ := v.b.r.View(v.group)
	return batchfmt.EpochOfTerm(view.Term)
}

// EpochEnd answers from the terms the log's entries carry. On a readable
// leader every entry of an older term is committed, so the first entry of
// a term above epoch starts where epoch ends; the current term ends at the
// high watermark.
func (v logView) EpochEnd(epoch int32) (int32, int64, error) {
	floor, end, err := v.log.EpochEnd(uint64(max(epoch, 0)))
	if err != nil {
		return -1, -1, kafkaError(err)
	}
	end = min(end, v.HighWatermark())
	if floor == 0 {
		return epoch, end, nil // older than the log: Kafka answers the epoch asked
	}
	return batchfmt.EpochOfTerm(floor), end, nil
}

// EpochAt is the term of the entry holding offset.
func (v logView) EpochAt(offset int64) int32 {
	t, err := v.log.TermAt(offset)
	if err != nil || t == 0 {
		return -1
	}
	return batchfmt.EpochOfTerm(t)
}

func (v logView) Fence() kafka.ReadFence {
	if canary.On(canary.NoReadFence) {
		f := raftnode.NewFence() // broken on purpose: leadership is not confirmed
		f.Finish(nil)
		return kafkaFence{f}
	}
	if canary.On(canary.FollowerServesFetch) {
		if view, _ := v.b.r.View(v.group); view.Leader != v.b.r.ID() {
			f := raftnode.NewFence() // broken on purpose: a follower confirms nothing
			f.Finish(nil)
			return kafkaFence{f}
		}
	}
	return kafkaFence{v.b.r.Fence(v.group)}
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

func ids32(ids []uint64) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
