package records

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// castagnoli selects the hardware CRC-32C path in hash/crc32.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CodecSet is a set of compression codecs, bit i for codec i.
type CodecSet uint8

// Has reports whether codec c is in the set.
func (s CodecSet) Has(c int8) bool { return c >= 0 && c < 8 && s&(1<<c) != 0 }

// Info summarises a run of v2 batches.
type Info struct {
	Batches      int
	Records      int64
	MaxTimestamp int64 // largest batch MaxTimestamp; -1 when none is set
	Codecs       CodecSet
	Bytes        int // total size of the batches
}

// ValidateV2 checks the records of one partition of a Produce request (v3+):
// one or more whole v2 batches. Per batch it reads only the fixed header and
// checks: framing within b, magic 2, the CRC-32C over attributes..end, size ≤
// maxBatchBytes, a known codec, not transactional/control, recordCount > 0
// and lastOffsetDelta == recordCount-1. Records are not parsed (produce path:
// no per-record work, no allocation); CheckRecords does that when wanted.
// Fields that clients fill arbitrarily and the broker owns — baseOffset,
// partitionLeaderEpoch, producer id/epoch/sequence — are not checked.
// A LogAppendTime bit is accepted as sent (VDL does not stamp append times).
//
// Errors: ErrCorrupt (truncation, bad length, bad magic, CRC),
// ErrTooLarge, ErrUnsupportedCompression, ErrInvalidRecord (counts, legacy
// magic 0/1, no batches) and ErrTransactional.
func ValidateV2(b []byte, maxBatchBytes int) (Info, error) {
	info := Info{MaxTimestamp: -1, Bytes: len(b)}
	if len(b) == 0 {
		return info, fmt.Errorf("%w: no record batches", ErrInvalidRecord)
	}
	be := binary.BigEndian
	for off := 0; off < len(b); {
		p := b[off:]
		if len(p) <= batchfmt.OffMagic {
			return info, fmt.Errorf("%w: %d trailing bytes at %d", ErrCorrupt, len(p), off)
		}
		// Legacy messages keep magic at the same position, so this names
		// a v0/v1 MessageSet sent on Produce v3+ precisely.
		switch m := int8(p[batchfmt.OffMagic]); m {
		case 2:
		case 0, 1:
			return info, fmt.Errorf("%w: magic %d message in a v2 produce at %d", ErrInvalidRecord, m, off)
		default:
			return info, fmt.Errorf("%w: magic %d at %d", ErrCorrupt, m, off)
		}
		if len(p) < HeaderSize {
			return info, fmt.Errorf("%w: truncated batch header at %d", ErrCorrupt, off)
		}
		l := int32(be.Uint32(p[batchfmt.OffBatchLength:]))
		size := int64(l) + batchfmt.LengthOverhead
		if l < batchfmt.MinBatchLength {
			return info, fmt.Errorf("%w: batch length %d at %d", ErrCorrupt, l, off)
		}
		if size > int64(len(p)) {
			return info, fmt.Errorf("%w: batch of %d bytes at %d overruns %d bytes", ErrCorrupt, size, off, len(p))
		}
		if size > int64(maxBatchBytes) {
			return info, fmt.Errorf("%w: batch of %d bytes exceeds %d", ErrTooLarge, size, maxBatchBytes)
		}
		p = p[:size]
		if crc32.Checksum(p[batchfmt.OffAttributes:], castagnoli) != be.Uint32(p[batchfmt.OffCRC:]) {
			return info, fmt.Errorf("%w: CRC-32C mismatch in batch at %d", ErrCorrupt, off)
		}
		attrs := be.Uint16(p[batchfmt.OffAttributes:])
		codec := int8(attrs & attrCodecMask)
		if codec > CodecZstd {
			return info, fmt.Errorf("%w: codec %d in batch at %d", ErrUnsupportedCompression, codec, off)
		}
		if attrs&(attrTransactional|attrControl) != 0 {
			return info, fmt.Errorf("%w (batch at %d)", ErrTransactional, off)
		}
		count := int32(be.Uint32(p[batchfmt.OffRecordCount:]))
		lastDelta := int32(be.Uint32(p[batchfmt.OffLastOffsetDelta:]))
		if count <= 0 || lastDelta != count-1 {
			return info, fmt.Errorf("%w: %d records with last offset delta %d in batch at %d", ErrInvalidRecord, count, lastDelta, off)
		}
		// An uncompressed record takes at least 7 bytes; more records
		// than that cannot be there.
		if codec == CodecNone && int64(count)*minRecordSize > int64(l-batchfmt.MinBatchLength) {
			return info, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, count, l-batchfmt.MinBatchLength)
		}
		info.Batches++
		info.Records += int64(count)
		info.Codecs |= 1 << codec
		info.MaxTimestamp = max(info.MaxTimestamp, int64(be.Uint64(p[batchfmt.OffMaxTimestamp:])))
		off += int(size)
	}
	return info, nil
}
