package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/vdl-project/vdl/kafka/records"
)

// errNone is the code of no error (kerr has no value for it).
const errNone int16 = 0

// errorCode maps a Backend error to a Kafka error code.
//
//   - not the leader (server.Backend also reports so a proposal
//     overwritten by a new leader, a group removed from this server, a
//     stopped host) → NOT_LEADER_FOR_PARTITION: the client refreshes
//     metadata and goes to the real leader;
//   - no leader → LEADER_NOT_AVAILABLE; unknown stream → UNKNOWN_TOPIC_OR_PARTITION;
//   - backpressure → NOT_ENOUGH_REPLICAS (19): retriable in every client,
//     and like backpressure it means "rejected, not written";
//   - a disk short of space → KAFKA_STORAGE_ERROR (56): retriable, not
//     written; an entry too large → MESSAGE_TOO_LARGE (10);
//   - timeout → REQUEST_TIMED_OUT; out of range (a read, or a retention
//     point above the high watermark) → OFFSET_OUT_OF_RANGE;
//   - idempotent producers: a sequence gap → OUT_OF_ORDER_SEQUENCE_NUMBER
//     (45), an old epoch → INVALID_PRODUCER_EPOCH (47) in every Produce
//     version (Kafka's ProduceResponse never carries PRODUCER_FENCED:
//     KAFKA-10687), an unknown or expired producer whose sequence is not 0
//     → UNKNOWN_PRODUCER_ID (59); a retry of a written batch whose offsets
//     are not known any more → DUPLICATE_SEQUENCE_NUMBER (46), which clients
//     take as success;
//   - record format errors → records.ErrorCode; anything else → UNKNOWN_SERVER_ERROR.
func errorCode(err error, produceVersion int16) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, ErrNoLeader):
		return kerr.LeaderNotAvailable.Code
	case errors.Is(err, ErrUnknownStream):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, ErrBackpressure):
		return kerr.NotEnoughReplicas.Code
	case errors.Is(err, ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, ErrDiskFull):
		return kerr.KafkaStorageError.Code
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, ErrOutOfRange), errors.Is(err, ErrRetainAboveHWM):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, ErrProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, ErrUnknownProducerID):
		return kerr.UnknownProducerID.Code
	case errors.Is(err, ErrDuplicateSequence):
		return kerr.DuplicateSequenceNumber.Code
	case errors.Is(err, records.ErrCorrupt), errors.Is(err, records.ErrTooLarge),
		errors.Is(err, records.ErrUnsupportedCompression), errors.Is(err, records.ErrInvalidRecord):
		return records.ErrorCode(err, produceVersion)
	}
	return kerr.UnknownServerError.Code
}
