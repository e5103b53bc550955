package kafka

import (
	"context"
	"errors"

	"github.com/vdl-project/vdl/kafka/records"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// Kafka error codes used by the front end.
const (
	errUnknownServerError       int16 = -1
	errNone                     int16 = 0
	errOffsetOutOfRange         int16 = 1
	errCorruptMessage           int16 = 2
	errUnknownTopicOrPartition  int16 = 3
	errLeaderNotAvailable       int16 = 5
	errNotLeaderForPartition    int16 = 6
	errRequestTimedOut          int16 = 7
	errMessageTooLarge          int16 = 10
	errInvalidTopic             int16 = 17
	errNotEnoughReplicas        int16 = 19
	errInvalidRequiredAcks      int16 = 21
	errUnsupportedVersion       int16 = 35
	errInvalidRequest           int16 = 42
	errFetchSessionIDNotFound   int16 = 70
	errInvalidFetchSessionEpoch int16 = 71
	errUnsupportedCompression   int16 = 76
	errKafkaStorageError        int16 = 56
)

// errorCode maps a Backend or storage error to a Kafka error code.
//
//   - not the leader (also a proposal overwritten by a new leader, a group
//     removed from this server, a stopped host) → NOT_LEADER_FOR_PARTITION:
//     the client refreshes metadata and goes to the real leader;
//   - no leader → LEADER_NOT_AVAILABLE; unknown stream → UNKNOWN_TOPIC_OR_PARTITION;
//   - backpressure → NOT_ENOUGH_REPLICAS (19): retriable in every client,
//     and like backpressure it means "rejected, not written";
//   - a disk short of space → KAFKA_STORAGE_ERROR (56): retriable, not
//     written; an entry too large → MESSAGE_TOO_LARGE (10);
//   - timeout → REQUEST_TIMED_OUT; out of range → OFFSET_OUT_OF_RANGE;
//   - record format errors → records.ErrorCode; anything else → UNKNOWN_SERVER_ERROR.
func errorCode(err error, produceVersion int16) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, ErrNotLeader), errors.Is(err, raftnode.ErrNotLeader),
		errors.Is(err, raftnode.ErrOverwritten), errors.Is(err, raftnode.ErrShutdown),
		errors.Is(err, raftnode.ErrStopped):
		return errNotLeaderForPartition
	case errors.Is(err, ErrNoLeader):
		return errLeaderNotAvailable
	case errors.Is(err, ErrUnknownStream), errors.Is(err, raftnode.ErrUnknownGroup):
		return errUnknownTopicOrPartition
	case errors.Is(err, ErrBackpressure), errors.Is(err, raftnode.ErrBackpressure):
		return errNotEnoughReplicas
	case errors.Is(err, raftnode.ErrEntryTooLarge):
		return errMessageTooLarge
	case errors.Is(err, raftnode.ErrDiskFull):
		return errKafkaStorageError
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return errRequestTimedOut
	case errors.Is(err, storage.ErrOutOfRange):
		return errOffsetOutOfRange
	case errors.Is(err, records.ErrCorrupt), errors.Is(err, records.ErrTooLarge),
		errors.Is(err, records.ErrUnsupportedCompression), errors.Is(err, records.ErrInvalidRecord):
		return records.ErrorCode(err, produceVersion)
	}
	return errUnknownServerError
}
