package kafka

import (
	"errors"

	"github.com/vdl-project/vdl/storage"
)

// Broker is one VDL server as Kafka clients see it: its node id and the
// address it advertises (the address it listens on; see KAFKA.md about
// localhost).
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   *string // the server's datacenter label, or nil
}

// StreamInfo is a stream's topic metadata.
type StreamInfo struct {
	Leader   int32   // broker id of the Raft leader; -1 when there is none
	Replicas []int32 // the replica set
	ISR      []int32 // replicas that are caught up (the leader's view)
	Local    bool    // this server is the leader
}

// Backend is what the Kafka front end needs from the rest of a VDL server.
// The server package implements it over raftnode.Host and storage logs; the
// simulator over its own world; kafkatest in memory. Its methods may be
// called from many connections' loops at once.
type Backend interface {
	Brokers() []Broker // advertised brokers, this one included
	Controller() int32 // broker id reported as controller (-1: none)
	Stream(name string) (StreamInfo, bool)
	// HasStream reports whether the stream exists: what the produce and
	// fetch paths need to know, without the cost of its metadata.
	HasStream(name string) bool
	Streams() []string // sorted

	// Produce appends whole validated v2 batches (records) to the stream
	// through Raft. done is called exactly once, with the base offset of
	// the first record or an error (ErrNotLeader / raftnode.ErrNotLeader,
	// ErrBackpressure / raftnode.ErrBackpressure, ErrTimeout, ...). done
	// may be called from any goroutine, even before Produce returns; the
	// driver turns it into a Session.ProduceDone event on the
	// connection's loop. records is not modified by the front end after
	// the call (the backend may stamp base offsets into it).
	Produce(stream string, records []byte, done func(base int64, err error))

	// Retain deletes a stream's records below before through Raft (whole
	// segments, never the active one, never above the commit); done is
	// called once, like Produce's. A before above the high watermark is
	// refused (ErrRetainAboveHWM). The coordinator compacts the offsets
	// stream with it.
	Retain(stream string, before int64, done func(err error))

	// Log returns the read view of a stream this server leads. Errors:
	// ErrUnknownStream, ErrNotLeader, ErrNoLeader.
	Log(stream string) (LogView, error)
}

// LogView is the read side of one stream on its leader.
type LogView interface {
	StartOffset() int64
	// HighWatermark is the committed and locally durable end offset:
	// consumers see [StartOffset, HighWatermark).
	HighWatermark() int64
	// EndOffset is the log end, uncommitted records included. The front end
	// never exposes it to consumers (ListOffsets "latest" is the HWM).
	EndOffset() int64
	// Read returns whole stored batches, the first one containing offset,
	// none at or past hwm, in total at most maxBytes except that the first
	// batch is always returned whole. storage.ErrOutOfRange when offset is
	// outside [StartOffset, hwm).
	Read(offset, hwm int64, maxBytes int) ([]storage.Batch, error)
	// OffsetForTime returns the first offset whose record timestamp is
	// ≥ ts and that timestamp, or (-1, -1) when no committed record has one.
	OffsetForTime(ts int64) (offset, timestamp int64, err error)
	// Fence starts a confirmation that this server still leads the stream,
	// in a round that begins now; reads made after it passes are
	// linearizable (a cut-off leader cannot serve a stale high watermark).
	Fence() ReadFence
	// Changed returns a channel closed at the next change of HighWatermark,
	// StartOffset or leadership after the call. The session takes it before
	// reading the values it waits on, so no change is missed.
	Changed() <-chan struct{}
}

// ReadFence is a pending confirmation of leadership (raftnode.Fence).
type ReadFence interface {
	Done() <-chan struct{} // closed when passed or failed
	Err() error            // after Done: nil if passed
}

// Errors a Backend returns (wrapped or not); raftnode's own errors are
// recognised as well (see errorCode).
var (
	ErrUnknownStream = errors.New("kafka: unknown stream")
	ErrNotLeader     = errors.New("kafka: not the leader")
	ErrNoLeader      = errors.New("kafka: stream has no leader")
	ErrBackpressure  = errors.New("kafka: too much uncommitted data, retry later")
	ErrTimeout       = errors.New("kafka: timed out waiting for commit")
	// ErrRetainAboveHWM: retention may delete only committed records.
	ErrRetainAboveHWM = errors.New("kafka: retention above the high watermark: only committed records can be deleted")
)
