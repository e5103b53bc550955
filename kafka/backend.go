package kafka

import (
	"errors"

	"github.com/vdl-project/vdl/kafka/batchfmt"
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
	// LeaderEpoch is the stream's leader epoch: its Raft term as this
	// server knows it (-1 when unknown).
	LeaderEpoch int32
}

// Backend is what the Kafka front end needs from the rest of a VDL server.
// The server package implements it over raftnode.Host and storage logs; the
// simulator over its own world; kafkatest in memory. Its methods may be
// called from many connections' loops at once.
// Records is what a produce appends: whole validated v2 batches, and the
// offsets they take as validation counted them (the layers below need the
// count and do not walk the batches again to learn it; raftnode checks it
// against the offsets storage stamps).
type Records struct {
	Batches []byte
	Offsets int64
	// Room, when not nil, is Batches with the byte before them: the same
	// memory (Room[1:] is Batches), the last byte of their length in the
	// request, read already. The backend may overwrite it to make a log
	// entry of the batches without copying them (raftnode.UserDataIn).
	Room []byte
	// Chain is the connection's produce chain (0: none): once one of its
	// produces fails, the backend refuses the later ones, which the
	// session had submitted before it learned of the failure (a failed
	// produce fails every later request on its connection; see
	// raftnode.Chain). The session ends it with Backend.EndChain.
	Chain uint64
}

// Produced is where a produce landed.
type Produced struct {
	Base     int64 // offset of the first record
	LogStart int64 // the stream's log start offset when it was acknowledged
}

type Backend interface {
	Brokers() []Broker // advertised brokers, this one included
	Controller() int32 // broker id reported as controller (-1: none)
	Stream(name string) (StreamInfo, bool)
	// HasStream reports whether the stream exists: what the produce and
	// fetch paths need to know, without the cost of its metadata.
	HasStream(name string) bool
	Streams() []string // sorted

	// Produce appends whole validated v2 batches (records) to the stream
	// through Raft. done is called exactly once, with where the records
	// landed (the base offset of the first record and the log start
	// offset then: the response carries both, so the front end never calls
	// back into the backend) or an error (ErrNotLeader, ErrBackpressure,
	// ErrTimeout, ... : this package's errors, see below). done
	// may be called from any goroutine, even before Produce returns; the
	// driver turns it into a Session.ProduceDone event on the
	// connection's loop. records is not modified by the front end after
	// the call (the backend may stamp base offsets into it).
	Produce(stream string, records Records, done func(Produced, error))
	// EndChain forgets a produce chain (Records.Chain): its connection
	// closed.
	EndChain(chain uint64)

	// Retain deletes a stream's records below before through Raft (whole
	// segments, never the active one, never above the commit); done is
	// called once, like Produce's. A before above the high watermark is
	// refused (ErrRetainAboveHWM). The coordinator compacts the offsets
	// stream with it.
	Retain(stream string, before int64, done func(err error))

	// Log returns the read view of a stream this server leads. Errors:
	// ErrUnknownStream, ErrNotLeader, ErrNoLeader.
	Log(stream string) (LogView, error)

	// DescribeStreamConfig reports a stream's configs: the replicated
	// overrides (as the stream's leader has them: a follower asks it, so an
	// alter acknowledged before is seen) over the server's defaults, for
	// the names of StreamConfigNames. done is called once, from any
	// goroutine. Errors: ErrUnknownStream, ErrNotLeader (not hosted here),
	// ErrNoLeader.
	DescribeStreamConfig(stream string, done func([]ConfigEntry, error))
	// AlterStreamConfig changes a stream's replicated config through its
	// Raft group (a follower forwards it to the leader): reset clears every
	// override first, then changes apply in order. The changes were
	// validated by the front end. done is called once, after the commit.
	AlterStreamConfig(stream string, reset bool, changes []ConfigChange, done func(error))
	// BrokerConfigs reports this server's (read-only) broker configs.
	BrokerConfigs() []ConfigEntry
}

// ConfigEntry is one config as DescribeConfigs reports it.
type ConfigEntry struct {
	Name   string
	Value  string
	Source ConfigSource
}

// ConfigSource says where a config's value comes from (Kafka's
// config_source codes).
type ConfigSource int8

const (
	ConfigOverride ConfigSource = 1 // DYNAMIC_TOPIC_CONFIG: set by AlterConfigs, replicated
	ConfigStatic   ConfigSource = 4 // STATIC_BROKER_CONFIG: the server's TOML (read-only)
	ConfigDefault  ConfigSource = 5 // DEFAULT_CONFIG
)

// ConfigChange is one change of a stream's replicated config: set Key to
// Value, or Delete it (back to the server's default).
type ConfigChange struct {
	Key, Value string
	Delete     bool
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
	// batch is always returned whole. ErrOutOfRange when offset is
	// outside [StartOffset, hwm).
	Read(offset, hwm int64, maxBytes int) ([]batchfmt.Batch, error)
	// OffsetForTime returns the first offset whose record timestamp is
	// ≥ ts and that timestamp, or (-1, -1) when no committed record has one.
	OffsetForTime(ts int64) (offset, timestamp int64, err error)
	// Fence starts a confirmation that this server still leads the stream,
	// in a round that begins now; reads made after it passes are
	// linearizable (a cut-off leader cannot serve a stale high watermark).
	Fence() ReadFence
	// LeaderEpoch is the stream's leader epoch on this leader: its Raft
	// term (docs/kafka.md "Leader epochs").
	LeaderEpoch() int32
	// EpochEnd answers OffsetForLeaderEpoch: the largest epoch ≤ epoch
	// that the log holds records of (epoch itself when the log starts
	// after it) and the offset where the next epoch starts, at most the
	// high watermark.
	EpochEnd(epoch int32) (leaderEpoch int32, endOffset int64, err error)
	// EpochAt is the leader epoch of the record at offset (-1: unknown).
	EpochAt(offset int64) int32
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

// Errors a Backend returns (wrapped or not): its implementation translates
// the errors of the layers below into these (server.Backend does so for
// raftnode's and storage's), and errorCode maps them to Kafka codes.
var (
	ErrUnknownStream = errors.New("kafka: unknown stream")
	ErrNotLeader     = errors.New("kafka: not the leader")
	ErrNoLeader      = errors.New("kafka: stream has no leader")
	ErrBackpressure  = errors.New("kafka: too much uncommitted data, retry later")
	ErrTimeout       = errors.New("kafka: timed out waiting for commit")
	// ErrRetainAboveHWM: retention may delete only committed records.
	ErrRetainAboveHWM = errors.New("kafka: retention above the high watermark: only committed records can be deleted")
	// ErrOutOfRange: a read outside [StartOffset, high watermark).
	ErrOutOfRange = errors.New("kafka: offset out of range")
	// ErrTooLarge: a produce larger than a replicated entry may be.
	ErrTooLarge = errors.New("kafka: record set too large for one entry")
	// ErrDiskFull: the leader's disk is short of space; nothing was written.
	ErrDiskFull = errors.New("kafka: disk full")
	// Idempotent produce refusals (nothing was written): a sequence gap,
	// an epoch older than the producer's, no state for the producer (never
	// seen, or expired) and a sequence other than 0.
	ErrOutOfOrderSequence = errors.New("kafka: out of order sequence number")
	ErrProducerEpoch      = errors.New("kafka: producer epoch older than the producer's")
	ErrUnknownProducerID  = errors.New("kafka: unknown producer id")
	// ErrDuplicateSequence: a retry of a batch that was written, whose
	// offsets the server cannot give any more (clients take it as success).
	ErrDuplicateSequence = errors.New("kafka: duplicate sequence number")
)
