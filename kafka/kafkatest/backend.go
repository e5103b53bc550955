// Package kafkatest is an in-memory kafka.Backend for tests: streams with a
// single leader and a log that stamps offsets, with a configurable commit
// delay (pipelining and long polls get exercised) or manual commits.
package kafkatest

import (
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/kafka/records"
)

// Backend is an in-memory kafka.Backend.
type Backend struct {
	mu         sync.Mutex
	self       int32
	brokers    []kafka.Broker
	streams    map[string]*Stream
	delay      time.Duration
	manual     bool
	pending    []*Pending
	produceErr error
	chains     []uint64 // each produce's Records.Chain, in order
	ended      []uint64 // EndChain's calls, in order
}

// New returns a backend whose only broker (the leader of every stream) is
// self.
func New(self kafka.Broker) *Backend {
	return &Backend{self: self.NodeID, brokers: []kafka.Broker{self}, streams: map[string]*Stream{}}
}

// SetCommitDelay makes produces commit (become visible and acknowledged)
// d after they are appended; offsets are still assigned in arrival order.
func (b *Backend) SetCommitDelay(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delay = d
}

// SetManual makes produces wait in Pending until the test commits or fails
// them.
func (b *Backend) SetManual(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual = on
}

// FailProduces makes every later produce fail with err (nil: stop).
func (b *Backend) FailProduces(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.produceErr = err
}

// SetBrokers replaces the advertised brokers.
func (b *Backend) SetBrokers(bs ...kafka.Broker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.brokers = bs
}

// AddStream creates an empty stream led by this broker.
func (b *Backend) AddStream(name string) *Stream {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &Stream{b: b, name: name, leader: b.self, changed: make(chan struct{})}
	b.streams[name] = st
	return st
}

// Stream returns a stream by name (nil if none).
func (b *Backend) StreamByName(name string) *Stream {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams[name]
}

// Brokers implements kafka.Backend.
func (b *Backend) Brokers() []kafka.Broker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.brokers)
}

// Controller implements kafka.Backend.
func (b *Backend) Controller() int32 { return b.self }

// Stream implements kafka.Backend.
func (b *Backend) Stream(name string) (kafka.StreamInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.streams[name]
	if !ok {
		return kafka.StreamInfo{}, false
	}
	return kafka.StreamInfo{Leader: st.leader, Replicas: []int32{b.self}, ISR: []int32{b.self}, Local: st.leader == b.self, LeaderEpoch: st.epoch}, true
}

// HasStream implements kafka.Backend.
func (b *Backend) HasStream(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.streams[name]
	return ok
}

// Streams implements kafka.Backend.
func (b *Backend) Streams() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.streams))
	for n := range b.streams {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Pending is a produce waiting for a manual Commit or Fail.
type Pending struct {
	Stream  string
	Records []byte
	st      *Stream
	done    func(kafka.Produced, error)
	base    int64
}

// TakePending returns the produces waiting in manual mode, oldest first.
func (b *Backend) TakePending() []*Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending
	b.pending = nil
	return p
}

// PendingCount returns how many produces wait for Commit or Fail (manual
// mode).
func (b *Backend) PendingCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// Commit makes a pending produce visible and acknowledges it. Offsets were
// assigned at arrival; commits move the high watermark up to the highest
// contiguous committed offset.
func (p *Pending) Commit() {
	p.st.commit(p.base)
	p.done(p.st.produced(p.base), nil)
}

// Fail fails a pending produce with err (its records stay appended but, if
// never committed, never become visible unless a later one commits).
func (p *Pending) Fail(err error) { p.done(kafka.Produced{Base: -1, LogStart: -1}, err) }

// Produce implements kafka.Backend.
// EndChain records the end of a produce chain (Chains). This backend
// does not refuse what follows a failed produce: raftnode does
// (raftnode.Chain).
func (b *Backend) EndChain(chain uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = append(b.ended, chain)
}

// Chains returns the chain of each produce so far, and the chains ended.
func (b *Backend) Chains() (produced, ended []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.chains), slices.Clone(b.ended)
}

func (b *Backend) Produce(stream string, recs kafka.Records, done func(kafka.Produced, error)) {
	b.mu.Lock()
	b.chains = append(b.chains, recs.Chain)
	st, ok := b.streams[stream]
	switch {
	case !ok:
		b.mu.Unlock()
		done(failed, kafka.ErrUnknownStream)
		return
	case st.leader != b.self:
		b.mu.Unlock()
		done(failed, kafka.ErrNotLeader)
		return
	case b.produceErr != nil:
		err := b.produceErr
		b.mu.Unlock()
		done(failed, err)
		return
	}
	data := slices.Clone(recs.Batches)
	base := st.end
	st.end = records.StampBaseOffsets(data, base)
	for p := 0; p+batchfmt.HeaderSize <= len(data); p += batchfmt.LengthOverhead + int(batchfmt.BatchLength(data[p:])) {
		batchfmt.SetLeaderEpoch(data[p:], st.epoch)
	}
	st.log = append(st.log, batchfmt.Batch{BaseOffset: base, NextOffset: st.end, Data: data})
	manual, delay := b.manual, b.delay
	if manual {
		b.pending = append(b.pending, &Pending{Stream: stream, Records: data, st: st, done: done, base: base})
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	if delay <= 0 {
		st.commit(base)
		done(st.produced(base), nil)
		return
	}
	time.AfterFunc(delay, func() {
		st.commit(base)
		done(st.produced(base), nil)
	})
}

// failed is what a failed produce landed at: nowhere.
var failed = kafka.Produced{Base: -1, LogStart: -1}

// produced is where a produce at base landed.
func (st *Stream) produced(base int64) kafka.Produced {
	return kafka.Produced{Base: base, LogStart: st.StartOffset()}
}

// Retain implements kafka.Backend: the start moves to before (at most the
// high watermark) and the batches wholly below it go.
func (b *Backend) Retain(stream string, before int64, done func(error)) {
	b.mu.Lock()
	st, ok := b.streams[stream]
	if !ok || st.leader != b.self {
		b.mu.Unlock()
		done(kafka.ErrNotLeader)
		return
	}
	before = min(before, st.hwm)
	if before > st.start {
		st.start = before
		for len(st.log) > 0 && st.log[0].NextOffset <= before {
			st.log = st.log[1:]
		}
		st.signal()
	}
	b.mu.Unlock()
	done(nil)
}

// Log implements kafka.Backend.
func (b *Backend) Log(stream string) (kafka.LogView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.streams[stream]
	switch {
	case !ok:
		return nil, kafka.ErrUnknownStream
	case st.leader < 0:
		return nil, kafka.ErrNoLeader
	case st.leader != b.self:
		return nil, kafka.ErrNotLeader
	}
	return st, nil
}

// Stream is one in-memory stream; it is its own LogView.
type Stream struct {
	b         *Backend
	name      string
	leader    int32
	start     int64
	end       int64
	hwm       int64
	committed map[int64]bool // committed bases above hwm
	log       []batchfmt.Batch
	changed   chan struct{}
	held      *heldFence // HoldFences
	epoch     int32      // the leader epoch (SetEpoch)
	config    map[string]string
	epochs    []epochStart
}

// epochStart is where an epoch's records start.
type epochStart struct {
	epoch int32
	start int64
}

// SetEpoch starts leader epoch e (greater than the current one) at the
// log end: later produces are stamped with it.
func (st *Stream) SetEpoch(e int32) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	st.epoch = e
	st.epochs = append(st.epochs, epochStart{e, st.end})
	st.signal()
}

// Truncate drops the records at and above off, committed ones included:
// what an unclean leader change does to a Kafka log (VDL never truncates
// committed records; tests use it to show clients detecting it through
// OffsetForLeaderEpoch).
func (st *Stream) Truncate(off int64) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	for len(st.log) > 0 && st.log[len(st.log)-1].BaseOffset >= off {
		st.log = st.log[:len(st.log)-1]
	}
	st.end = off
	if len(st.log) > 0 {
		st.end = st.log[len(st.log)-1].NextOffset
	}
	st.hwm = min(st.hwm, st.end)
	st.signal()
}

// LeaderEpoch implements kafka.LogView.
func (st *Stream) LeaderEpoch() int32 {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	return st.epoch
}

// EpochEnd implements kafka.LogView over the epochs set (epoch 0 starts
// at offset 0).
func (st *Stream) EpochEnd(epoch int32) (int32, int64, error) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	hist := append([]epochStart{{0, 0}}, st.epochs...)
	floor := int32(-1)
	for _, e := range hist {
		if e.epoch > epoch {
			if floor < 0 {
				floor = epoch
			}
			return floor, min(e.start, st.hwm), nil
		}
		floor = e.epoch
	}
	return floor, st.hwm, nil
}

// EpochAt implements kafka.LogView.
func (st *Stream) EpochAt(offset int64) int32 {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	if i := st.find(offset); i >= 0 {
		return batchfmt.LeaderEpoch(st.log[i].Data)
	}
	return -1
}

// SetLeader sets the stream's leader (-1: none).
func (st *Stream) SetLeader(id int32) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	st.leader = id
	st.signal()
}

// SetStart moves the log start (retention).
func (st *Stream) SetStart(off int64) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	st.start = off
	st.signal()
}

func (st *Stream) signal() {
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *Stream) commit(base int64) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	if st.committed == nil {
		st.committed = map[int64]bool{}
	}
	st.committed[base] = true
	moved := false
	for {
		i := st.find(st.hwm)
		if i < 0 || !st.committed[st.log[i].BaseOffset] {
			break
		}
		delete(st.committed, st.log[i].BaseOffset)
		st.hwm = st.log[i].NextOffset
		moved = true
	}
	if moved {
		st.signal()
	}
}

// find returns the index of the batch containing off, or -1.
func (st *Stream) find(off int64) int {
	i := sort.Search(len(st.log), func(i int) bool { return st.log[i].NextOffset > off })
	if i == len(st.log) || st.log[i].BaseOffset > off {
		return -1
	}
	return i
}

// StartOffset implements kafka.LogView.
func (st *Stream) StartOffset() int64 {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	return st.start
}

// HighWatermark implements kafka.LogView.
func (st *Stream) HighWatermark() int64 {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	return st.hwm
}

// EndOffset implements kafka.LogView.
func (st *Stream) EndOffset() int64 {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	return st.end
}

// Changed implements kafka.LogView.
func (st *Stream) Changed() <-chan struct{} {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	return st.changed
}

// Read implements kafka.LogView.
func (st *Stream) Read(offset, hwm int64, maxBytes int) ([]batchfmt.Batch, error) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	hwm = min(hwm, st.hwm)
	if offset < st.start || offset >= hwm {
		return nil, kafka.ErrOutOfRange
	}
	i := st.find(offset)
	if i < 0 {
		return nil, kafka.ErrOutOfRange
	}
	var out []batchfmt.Batch
	n := 0
	for ; i < len(st.log) && st.log[i].NextOffset <= hwm; i++ {
		if len(out) > 0 && n+len(st.log[i].Data) > maxBytes {
			break
		}
		out = append(out, st.log[i])
		n += len(st.log[i].Data)
	}
	return out, nil
}

// OffsetForTime implements kafka.LogView, at batch granularity: the base
// offset and MaxTimestamp of the first committed batch whose MaxTimestamp
// is ≥ ts.
func (st *Stream) OffsetForTime(ts int64) (int64, int64, error) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	for _, b := range st.log {
		if b.NextOffset > st.hwm {
			break
		}
		for h := range records.Batches(b.Data) {
			if h.MaxTimestamp >= ts && h.NextOffset() > st.start {
				return max(h.BaseOffset, st.start), h.MaxTimestamp, nil
			}
		}
	}
	return -1, -1, nil
}

// Fence passes at once (the in-memory backend has one copy of each stream
// and leadership only changes when a test says so), unless fences are held.
func (st *Stream) Fence() kafka.ReadFence {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	if st.held != nil {
		return st.held
	}
	return passedFence{}
}

// HoldFences makes the fences started from now on wait until release is
// called with their outcome (nil: leadership confirmed).
func (st *Stream) HoldFences() (release func(err error)) {
	st.b.mu.Lock()
	defer st.b.mu.Unlock()
	h := &heldFence{done: make(chan struct{})}
	st.held = h
	return func(err error) {
		st.b.mu.Lock()
		defer st.b.mu.Unlock()
		h.err = err
		close(h.done)
		if st.held == h {
			st.held = nil
		}
	}
}

type heldFence struct {
	done chan struct{}
	err  error // set before done closes
}

func (f *heldFence) Done() <-chan struct{} { return f.done }
func (f *heldFence) Err() error            { return f.err }

type passedFence struct{}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (passedFence) Done() <-chan struct{} { return closedCh }
func (passedFence) Err() error            { return nil }

var _ kafka.Backend = (*Backend)(nil)
var _ kafka.LogView = (*Stream)(nil)

// ErrInjected is a convenient error for FailProduces.
var ErrInjected = errors.New("kafkatest: injected failure")

// streamConfigDefaults are the in-memory backend's stream config defaults.
var streamConfigDefaults = map[string]string{
	kafka.ConfigRetentionMs: "604800000", kafka.ConfigRetentionBytes: "-1", kafka.ConfigCleanupPolicy: "delete",
	kafka.ConfigMaxMessage: "1048588", kafka.ConfigPreferredDC: "",
}

// DescribeStreamConfig implements kafka.Backend (at once).
func (b *Backend) DescribeStreamConfig(stream string, done func([]kafka.ConfigEntry, error)) {
	done(b.streamConfigs(stream))
}

func (b *Backend) streamConfigs(stream string) ([]kafka.ConfigEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.streams[stream]
	if !ok {
		return nil, kafka.ErrUnknownStream
	}
	var out []kafka.ConfigEntry
	for _, n := range kafka.StreamConfigNames {
		e := kafka.ConfigEntry{Name: n, Value: streamConfigDefaults[n], Source: kafka.ConfigDefault}
		if v, ok := st.config[n]; ok {
			e.Value, e.Source = v, kafka.ConfigOverride
		}
		out = append(out, e)
	}
	return out, nil
}

// AlterStreamConfig implements kafka.Backend (applied at once).
func (b *Backend) AlterStreamConfig(stream string, reset bool, changes []kafka.ConfigChange, done func(error)) {
	b.mu.Lock()
	st, ok := b.streams[stream]
	if !ok {
		b.mu.Unlock()
		done(kafka.ErrUnknownStream)
		return
	}
	if reset || st.config == nil {
		st.config = map[string]string{}
	}
	for _, c := range changes {
		if c.Delete {
			delete(st.config, c.Key)
		} else {
			st.config[c.Key] = c.Value
		}
	}
	b.mu.Unlock()
	done(nil)
}

// BrokerConfigs implements kafka.Backend.
func (b *Backend) BrokerConfigs() []kafka.ConfigEntry {
	return []kafka.ConfigEntry{{Name: "broker.id", Value: strconv.Itoa(int(b.self)), Source: kafka.ConfigStatic}}
}
