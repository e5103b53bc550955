package kafka

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/kafka/group"
)

// DefaultOffsetsTopic is the internal stream holding committed offsets.
const DefaultOffsetsTopic = "__consumer_offsets"

// Groups is a server's group coordinator, shared by all its connections'
// sessions. It wraps the deterministic group.Coordinator with a mutex and
// ties it to the offsets stream:
//
//   - this server coordinates every group exactly while it leads the offsets
//     stream (Backend.Log(OffsetsTopic) succeeds); otherwise requests get
//     NOT_COORDINATOR and FindCoordinator names the stream's leader;
//   - committed offsets are records of that stream, written through
//     Backend.Produce (Raft) before OffsetCommit is answered;
//   - the in-memory offset table is the replay of that stream: on every
//     access the coordinator applies whatever the stream holds beyond what
//     it has applied (all of it after a start or a leadership change);
//   - membership lives in memory; losing leadership drops it (parked
//     requests get NOT_COORDINATOR) and members rejoin at the new
//     coordinator, as in Kafka;
//   - on becoming coordinator (a leadership change) it first confirms its
//     leadership with a read fence and only then loads the offsets and
//     serves: until then requests get COORDINATOR_LOAD_IN_PROGRESS. A
//     deposed leader that does not know it yet cannot pass the fence, so
//     it never serves groups from a stale offsets table. OffsetFetch also
//     fences each request (offsetFetchOp).
//
// Time comes in as the callers' now (ns); the driver also calls Tick
// periodically so that session timeouts fire when nobody calls.
type Groups struct {
	be    Backend
	topic string
	wall  func(now int64) int64 // now → Unix ms, for commit timestamps

	mu      sync.Mutex
	c       *group.Coordinator
	applied int64 // next offsets-log offset to apply
	leading bool
	confirm ReadFence // the leadership confirmation in flight (nil: confirmed)
	bad     int       // undecodable records seen in the offsets log

	compactAfter int64
	compact      compaction

	pids *ProducerIDs // InitProducerId's ids, allocated in the offsets stream
}

// compaction is the offsets log's compaction in flight: a checkpoint being
// written, then the retention of what it covers. Its state changes from
// Produce callbacks (any goroutine, never blocking), the rest under mu.
type compaction struct {
	state   atomic.Int32 // compactIdle, compactWriting, compactWritten, compactRetaining
	pending atomic.Int32 // checkpoint batches not yet committed
	failed  atomic.Bool
	covered int64 // the checkpoint repeats every commit below this offset
}

const (
	compactIdle int32 = iota
	compactWriting
	compactWritten
	compactRetaining
)

// GroupsConfig configures a Groups. Zero fields take defaults.
type GroupsConfig struct {
	OffsetsTopic string // default DefaultOffsetsTopic
	Group        group.Config
	// CompactAfter is how many records the offsets log may hold (and
	// at least twice its live keys) before it is compacted. Default 100000.
	CompactAfter int64
	// Wall maps the driver's now to Unix milliseconds (commit timestamps);
	// default now/1e6.
	Wall func(now int64) int64
	// ForwardProducerIDs asks the offsets stream's leader for a block of
	// producer ids (Config.ForwardProducerIDs).
	ForwardProducerIDs func(leader int32, done func(first int64, err error))
}

// NewGroups returns a coordinator over be.
func NewGroups(cfg GroupsConfig, be Backend) *Groups {
	if cfg.OffsetsTopic == "" {
		cfg.OffsetsTopic = DefaultOffsetsTopic
	}
	if cfg.Wall == nil {
		cfg.Wall = func(now int64) int64 { return now / 1e6 }
	}
	if cfg.CompactAfter == 0 {
		cfg.CompactAfter = 100000
	}
	return &Groups{be: be, topic: cfg.OffsetsTopic, wall: cfg.Wall, c: group.New(cfg.Group), compactAfter: cfg.CompactAfter,
		pids: newProducerIDs(be, cfg.OffsetsTopic, cfg.ForwardProducerIDs)}
}

// ProducerIDs returns the server's producer id allocator.
func (g *Groups) ProducerIDs() *ProducerIDs { return g.pids }

// OffsetsTopic returns the internal stream's name.
func (g *Groups) OffsetsTopic() string { return g.topic }

// access checks that this server coordinates, catches up with the offsets
// log and applies the passage of time. g.mu is held.
func (g *Groups) access(now int64) int16 {
	view, err := g.be.Log(g.topic)
	if err != nil {
		if g.leading {
			g.c.Unload()
			g.leading = false
		}
		g.confirm = nil
		switch {
		case errors.Is(err, ErrUnknownStream):
			return kerr.CoordinatorNotAvailable.Code
		case errors.Is(err, ErrNoLeader):
			return kerr.CoordinatorLoadInProgress.Code
		}
		return kerr.NotCoordinator.Code
	}
	if !g.leading {
		g.leading = true
		g.confirm = view.Fence()
	}
	if g.confirm != nil {
		select {
		case <-g.confirm.Done():
			if g.confirm.Err() != nil {
				g.confirm = view.Fence() // not confirmed: try again
				return kerr.CoordinatorLoadInProgress.Code
			}
			g.confirm = nil
		default:
			return kerr.CoordinatorLoadInProgress.Code
		}
	}
	code := g.catchUp(view)
	g.c.Advance(now)
	return code
}

// catchUp applies the offsets log from where it stopped to the high
// watermark.
func (g *Groups) catchUp(view LogView) int16 {
	hwm := view.HighWatermark()
	if start := view.StartOffset(); g.applied < start {
		g.applied = start // below the log start nothing is left to apply
	}
	for g.applied < hwm {
		bs, err := view.Read(g.applied, hwm, 1<<20)
		if err != nil || len(bs) == 0 {
			return kerr.CoordinatorLoadInProgress.Code
		}
		for _, b := range bs {
			bad, _ := group.DecodeBatches(b.Data, func(pos, logOffset int64, k group.OffsetKey, o *group.Offset) {
				if pos >= g.applied {
					g.c.ApplyOffset(k, o, logOffset)
				}
			})
			g.bad += bad
			g.applied = max(g.applied, b.NextOffset)
		}
	}
	return group.ErrNone
}

// Tick applies the passage of time (session and rebalance timeouts),
// notices a lost leadership and compacts the offsets log; the driver calls
// it periodically.
func (g *Groups) Tick(now int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.access(now) == group.ErrNone {
		if view, err := g.be.Log(g.topic); err == nil {
			g.compactStep(view, now)
		}
	}
}

// compactStep moves the offsets log's compaction on: once the log holds
// CompactAfter records (and twice its live keys), the coordinator writes a
// checkpoint repeating every key's latest commit (group/codec.go), then
// deletes the log below the offset the checkpoint covers. A failure starts
// over later. g.mu is held; this server coordinates.
func (g *Groups) compactStep(view LogView, now int64) {
	c := &g.compact
	switch c.state.Load() {
	case compactIdle:
		records := view.HighWatermark() - view.StartOffset()
		if records < g.compactAfter || records < 2*int64(g.c.OffsetCount()) {
			return
		}
		batches := group.EncodeCheckpoint(g.c.Checkpoint(), g.wall(now), 256<<10)
		if len(batches) == 0 {
			return
		}
		c.covered = g.applied
		c.failed.Store(false)
		c.pending.Store(int32(len(batches)))
		c.state.Store(compactWriting)
		for _, b := range batches {
			g.be.Produce(g.topic, Records{Batches: b, Offsets: batchfmt.Offsets(b)}, func(_ Produced, err error) {
				if err != nil {
					c.failed.Store(true)
				}
				if c.pending.Add(-1) == 0 {
					if c.failed.Load() {
						c.state.Store(compactIdle)
					} else {
						c.state.Store(compactWritten)
					}
				}
			})
		}
	case compactWritten:
		c.state.Store(compactRetaining)
		g.be.Retain(g.topic, c.covered, func(error) { c.state.Store(compactIdle) })
	}
}

// nextDeadline is the coordinator's next timeout (0: none).
func (g *Groups) nextDeadline() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.c.NextDeadline()
}

// GroupStatus is one group as the admin interface shows it.
type GroupStatus struct {
	group.Summary
	Offsets []OffsetStatus `json:"offsets"`
}

// OffsetStatus is one committed offset with the lag behind the stream's
// high watermark (-1 when this server cannot read the stream).
type OffsetStatus struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	Metadata    string `json:"metadata"`
	LeaderEpoch int32  `json:"leader_epoch"`
	CommitTime  int64  `json:"commit_time_ms"`
	HighWater   int64  `json:"high_watermark"`
	Lag         int64  `json:"lag"`
}

// CoordinatorStatus is what the admin interface shows.
type CoordinatorStatus struct {
	Coordinator   bool          `json:"coordinator"` // this server coordinates (leads the offsets stream)
	Error         int16         `json:"error,omitempty"`
	OffsetsTopic  string        `json:"offsets_topic"`
	AppliedOffset int64         `json:"applied_offset"`
	BadRecords    int           `json:"bad_records,omitempty"`
	Groups        []GroupStatus `json:"groups"`
}

// Status describes every group with its members, generation, committed
// offsets and lag. hwm gives a stream's high watermark (nil: read it from
// the Backend, which works only for streams this server leads).
func (g *Groups) Status(now int64, hwm func(topic string) (int64, bool)) CoordinatorStatus {
	if hwm == nil {
		hwm = func(topic string) (int64, bool) {
			view, err := g.be.Log(topic)
			if err != nil {
				return 0, false
			}
			return view.HighWatermark(), true
		}
	}
	g.mu.Lock()
	code := g.access(now)
	st := CoordinatorStatus{Coordinator: g.leading, Error: code, OffsetsTopic: g.topic, AppliedOffset: g.applied, BadRecords: g.bad, Groups: []GroupStatus{}}
	type item struct {
		gs   GroupStatus
		offs []group.OffsetEntry
	}
	var items []item
	if g.leading {
		for _, l := range g.c.List() {
			items = append(items, item{GroupStatus{Summary: g.c.Describe(l.Group)}, g.c.Offsets(l.Group)})
		}
	}
	g.mu.Unlock()
	// Lag is read outside the lock (the backend may take its own locks).
	for _, it := range items {
		it.gs.Offsets = []OffsetStatus{}
		for _, o := range it.offs {
			os := OffsetStatus{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset.Offset, Metadata: o.Metadata,
				LeaderEpoch: o.LeaderEpoch, CommitTime: o.CommitTime, HighWater: -1, Lag: -1}
			if h, ok := hwm(o.Topic); ok {
				os.HighWater = h
				os.Lag = max(h-o.Offset.Offset, 0)
			}
			it.gs.Offsets = append(it.gs.Offsets, os)
		}
		st.Groups = append(st.Groups, it.gs)
	}
	return st
}
