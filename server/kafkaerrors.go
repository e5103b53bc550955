package server

import (
	"errors"
	"fmt"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// kafkaError translates an error of the replication engine or of storage
// into the kafka package's error for it, which the front end maps to a
// Kafka error code; the original stays in the chain (errors.Is finds both,
// and the message keeps its detail). Other errors pass unchanged (the front
// end answers UNKNOWN_SERVER_ERROR).
func kafkaError(err error) error {
	if k := kafkaSentinel(err); k != nil {
		return fmt.Errorf("%w: %w", k, err)
	}
	return err
}

// kafkaSentinel is the kafka error for err, nil when there is none.
func kafkaSentinel(err error) error {
	switch {
	case err == nil:
		return nil
	// Not the leader, or a proposal overwritten by a new leader's log:
	// nothing was or will be written, and the client must go to the real
	// leader. NOT_LEADER_OR_FOLLOWER says exactly that to a client
	// (librdkafka: "MsgNotPersisted"), which may send the records again.
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrOverwritten):
		return kafka.ErrNotLeader
	// A host that stopped (a fail-stop on a disk error, a shutdown) or a
	// group removed with the proposal in flight, or a log replaced by a
	// snapshot before the entry applied: the entry may have reached the
	// followers and commit without this server — the outcome is unknown,
	// and is answered as a timeout (REQUEST_TIMED_OUT: possibly persisted).
	// Answered NOT_LEADER, kcat sent such a record again to the new leader:
	// written twice (campaign dc3_replace: the leader fail-stopped on an
	// injected fsync error right after proposing it).
	case errors.Is(err, raftnode.ErrShutdown), errors.Is(err, raftnode.ErrStopped),
		errors.Is(err, raftnode.ErrUnknownOutcome):
		return kafka.ErrTimeout
	case errors.Is(err, raftnode.ErrUnknownGroup): // removed from this server
		return kafka.ErrUnknownStream
	// Refused behind a failed produce of its connection: not written,
	// like a produce refused for backpressure (the connection closes
	// after the failed one anyway, and this answer is never sent).
	case errors.Is(err, raftnode.ErrBackpressure), errors.Is(err, raftnode.ErrChainFailed):
		return kafka.ErrBackpressure
	case errors.Is(err, raftnode.ErrEntryTooLarge):
		return kafka.ErrTooLarge
	case errors.Is(err, raftnode.ErrDiskFull):
		return kafka.ErrDiskFull
	case errors.Is(err, storage.ErrOutOfRange):
		return kafka.ErrOutOfRange
	case errors.Is(err, raftnode.ErrOutOfOrderSequence):
		return kafka.ErrOutOfOrderSequence
	case errors.Is(err, raftnode.ErrProducerEpoch):
		return kafka.ErrProducerEpoch
	case errors.Is(err, raftnode.ErrUnknownProducer):
		return kafka.ErrUnknownProducerID
	case errors.Is(err, raftnode.ErrDuplicateSequence):
		return kafka.ErrDuplicateSequence
	case errors.Is(err, raftnode.ErrProducersLoading):
		return kafka.ErrNoLeader
	}
	return nil
}

// kafkaFence is a read fence whose error is the kafka package's.
type kafkaFence struct{ f *raftnode.Fence }

func (k kafkaFence) Done() <-chan struct{} { return k.f.Done() }
func (k kafkaFence) Err() error            { return kafkaError(k.f.Err()) }
