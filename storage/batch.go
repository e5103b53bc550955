package storage

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Kafka RecordBatch v2 fields the engine reads (big-endian, from the batch
// start). The CRC is the Kafka layer's business; baseOffset lies outside it.
const (
	kbBaseOffset      = 0
	kbLength          = 8  // int32: bytes after this field
	kbMagic           = 16 // must be 2
	kbLastOffsetDelta = 23 // int32
	kbMaxTimestamp    = 35 // int64
	kbHeaderSize      = 61 // fixed part of a v2 batch, records follow
)

var be = binary.BigEndian

// batchInfo is what a run of whole v2 batches contributes to the log.
type batchInfo struct {
	offsets uint64 // sum of lastOffsetDelta+1
	maxTs   int64  // largest maxTimestamp
}

// parseBatches checks that data is one or more whole v2 batches and sums
// the offsets they take. Any violation is ErrBadEntry.
func parseBatches(data []byte) (batchInfo, error) {
	info := batchInfo{maxTs: math.MinInt64}
	if len(data) == 0 {
		return info, fmt.Errorf("%w: user entry without batches", ErrBadEntry)
	}
	for p := 0; p < len(data); {
		rest := data[p:]
		if len(rest) < kbHeaderSize {
			return info, fmt.Errorf("%w: short batch at byte %d", ErrBadEntry, p)
		}
		n := int64(int32(be.Uint32(rest[kbLength:])))
		if n < kbHeaderSize-12 || 12+n > int64(len(rest)) {
			return info, fmt.Errorf("%w: bad batch length %d at byte %d", ErrBadEntry, n, p)
		}
		if rest[kbMagic] != 2 {
			return info, fmt.Errorf("%w: batch magic %d at byte %d", ErrBadEntry, rest[kbMagic], p)
		}
		d := int32(be.Uint32(rest[kbLastOffsetDelta:]))
		if d < 0 {
			return info, fmt.Errorf("%w: negative lastOffsetDelta at byte %d", ErrBadEntry, p)
		}
		info.offsets += uint64(d) + 1
		info.maxTs = max(info.maxTs, int64(be.Uint64(rest[kbMaxTimestamp:])))
		p += int(12 + n)
	}
	if info.offsets > math.MaxUint32 {
		return info, fmt.Errorf("%w: entry takes %d offsets", ErrBadEntry, info.offsets)
	}
	return info, nil
}

// stampBatches writes each batch's baseOffset, starting at base. data was
// validated by parseBatches.
func stampBatches(data []byte, base int64) {
	for p := 0; p < len(data); {
		be.PutUint64(data[p+kbBaseOffset:], uint64(base))
		base += int64(int32(be.Uint32(data[p+kbLastOffsetDelta:]))) + 1
		p += 12 + int(int32(be.Uint32(data[p+kbLength:])))
	}
}

// UserOffsets checks that data is a user entry payload (TagUser followed
// by whole v2 batches) and returns how many offsets it takes. Proposers
// use it to validate, and to merge several payloads into one entry: the
// batches of a TagUser payload are stamped one after the other, so the
// k-th merged payload starts at the entry's base plus the offsets of those
// before it.
func UserOffsets(data []byte) (int64, error) {
	if len(data) == 0 || data[0] != TagUser {
		return 0, fmt.Errorf("%w: not a user entry", ErrBadEntry)
	}
	info, err := parseBatches(data[1:])
	return int64(info.offsets), err
}
