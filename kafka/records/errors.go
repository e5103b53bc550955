// Package records is the record-format layer between the Kafka wire and
// storage. Storage keeps Kafka RecordBatch v2 bytes exactly as a consumer
// receives them; this package validates produced v2 batches without parsing
// records, converts legacy MessageSets (magic 0/1) to v2 on produce and back
// on old fetches, and wraps the compression codecs with bounded output.
package records

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Errors are sentinel values, wrapped with detail; test with errors.Is and
// map with ErrorCode.
var (
	// ErrCorrupt: framing, CRC, truncation or codec stream damage.
	ErrCorrupt = errors.New("records: corrupt")
	// ErrTooLarge: a batch, message or decompressed payload over the limit.
	ErrTooLarge = errors.New("records: too large")
	// ErrUnsupportedCompression: codec id not 0..4, or zstd in a MessageSet.
	ErrUnsupportedCompression = errors.New("records: unsupported compression")
	// ErrInvalidRecord: well-framed and checksummed, but breaks a rule
	// (record count vs offset delta, legacy magic in a v2 produce, …).
	ErrInvalidRecord = errors.New("records: invalid record")
	// ErrTransactional: transactional or control batch; VDL has no
	// transactions. It is also an ErrInvalidRecord.
	ErrTransactional = fmt.Errorf("%w: transactional and control batches are not supported", ErrInvalidRecord)
)

// produceVersionWithInvalidRecord: KIP-467 added INVALID_RECORD with
// Produce v8.
const produceVersionWithInvalidRecord = 8

// ErrorCode maps an error from this package to the Kafka error code for a
// Produce response of the given version. INVALID_RECORD (87) only exists
// from Produce v8; older clients get CORRUPT_MESSAGE (2) instead, which they
// know. UNSUPPORTED_COMPRESSION_TYPE (76) is returned as is: older clients
// treat it as an unknown, non-retriable error, which is the right outcome.
// Unknown errors map to -1 (UNKNOWN_SERVER_ERROR).
func ErrorCode(err error, produceVersion int16) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, ErrUnsupportedCompression):
		return kerr.UnsupportedCompressionType.Code
	case errors.Is(err, ErrInvalidRecord):
		if produceVersion >= produceVersionWithInvalidRecord {
			return kerr.InvalidRecord.Code
		}
		return kerr.CorruptMessage.Code
	case errors.Is(err, ErrCorrupt):
		return kerr.CorruptMessage.Code
	}
	return kerr.UnknownServerError.Code
}
