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
	// A proposal overwritten by a new leader, a stopped host or group: the
	// client must go to the real leader.
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrOverwritten),
		errors.Is(err, raftnode.ErrShutdown), errors.Is(err, raftnode.ErrStopped):
		return kafka.ErrNotLeader
	case errors.Is(err, raftnode.ErrUnknownGroup): // removed from this server
		return kafka.ErrUnknownStream
	case errors.Is(err, raftnode.ErrBackpressure):
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
