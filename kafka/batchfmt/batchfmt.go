// Package batchfmt owns the layout of a Kafka RecordBatch v2 header, the
// unit VDL stores and serves: the Kafka front end (kafka/records) validates
// and converts batches, storage counts their offsets, stamps their base
// offsets and indexes their timestamps, and the server reads a batch's max
// timestamp, all with the offsets defined here. It depends on nothing, so
// any layer may use it.
//
// The fixed header, big-endian, from the start of a batch (Kafka's
// DefaultRecordBatch):
//
//	offset size field
//	     0    8 baseOffset            stamped by storage; outside the CRC
//	     8    4 batchLength           bytes after this field
//	    12    4 partitionLeaderEpoch  stamped by storage (the entry's Raft term); outside the CRC
//	    16    1 magic                 2
//	    17    4 crc                   CRC-32C of attributes..end
//	    21    2 attributes            codec, timestamp type, transactional, control
//	    23    4 lastOffsetDelta       the batch takes lastOffsetDelta+1 offsets
//	    27    8 firstTimestamp
//	    35    8 maxTimestamp
//	    43    8 producerId
//	    51    2 producerEpoch
//	    53    4 baseSequence
//	    57    4 recordCount
//	    61      records
//
// baseOffset, batchLength and partitionLeaderEpoch lie before the CRC
// (which covers attributes to the end), so storage may stamp baseOffset and
// partitionLeaderEpoch without touching the CRC.
package batchfmt

import "encoding/binary"

// Field offsets in a batch.
const (
	OffBaseOffset      = 0
	OffBatchLength     = 8
	OffLeaderEpoch     = 12
	OffMagic           = 16
	OffCRC             = 17
	OffAttributes      = 21
	OffLastOffsetDelta = 23
	OffFirstTimestamp  = 27
	OffMaxTimestamp    = 35
	OffProducerID      = 43
	OffProducerEpoch   = 51
	OffBaseSequence    = 53
	OffRecordCount     = 57

	// HeaderSize is the fixed part: the records follow.
	HeaderSize = 61
	// LengthOverhead is what batchLength does not count (baseOffset and
	// itself): a batch is batchLength+LengthOverhead bytes.
	LengthOverhead = 12
	// MinBatchLength is the smallest legal batchLength (no records).
	MinBatchLength = HeaderSize - LengthOverhead
	// Magic is the magic byte of a v2 batch.
	Magic = 2
)

var be = binary.BigEndian

// BatchLength is the batchLength field of the batch at the start of b.
func BatchLength(b []byte) int32 { return int32(be.Uint32(b[OffBatchLength:])) }

// LastOffsetDelta is the lastOffsetDelta field of the batch at the start of b.
func LastOffsetDelta(b []byte) int32 { return int32(be.Uint32(b[OffLastOffsetDelta:])) }

// MaxTimestamp is the maxTimestamp field of the batch at the start of b.
func MaxTimestamp(b []byte) int64 { return int64(be.Uint64(b[OffMaxTimestamp:])) }

// BaseOffset is the baseOffset field of the batch at the start of b.
func BaseOffset(b []byte) int64 { return int64(be.Uint64(b[OffBaseOffset:])) }

// SetBaseOffset stamps the baseOffset of the batch at the start of b.
func SetBaseOffset(b []byte, base int64) { be.PutUint64(b[OffBaseOffset:], uint64(base)) }

// SetLeaderEpoch stamps the partitionLeaderEpoch of the batch at the start of b.
func SetLeaderEpoch(b []byte, epoch int32) { be.PutUint32(b[OffLeaderEpoch:], uint32(epoch)) }

// LeaderEpoch is the partitionLeaderEpoch field of the batch at the start of b.
func LeaderEpoch(b []byte) int32 { return int32(be.Uint32(b[OffLeaderEpoch:])) }

// EpochOfTerm is the Kafka leader epoch of a Raft term: the term itself,
// capped at the int32 the protocol carries (a term never gets there in
// practice: it counts elections).
func EpochOfTerm(term uint64) int32 { return int32(min(term, 1<<31-1)) }

// Batch is one run of whole Kafka RecordBatch v2 batches read from a log,
// as stored (baseOffset stamped). The slices alias immutable memory (a
// cache or a freshly read buffer); callers must not modify them.
type Batch struct {
	BaseOffset int64  // offset of the first record
	NextOffset int64  // offset after the last record
	Data       []byte // one or more whole v2 batches
}

// Offsets returns how many offsets the whole batches in b take (the sum of
// their lastOffsetDelta+1), walking only their headers. For batches built
// or validated by the caller: nothing is checked.
func Offsets(b []byte) int64 {
	var n int64
	for len(b) >= HeaderSize {
		n += int64(LastOffsetDelta(b)) + 1
		b = b[min(len(b), LengthOverhead+int(BatchLength(b))):]
	}
	return n
}
