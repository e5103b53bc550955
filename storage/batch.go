package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// The engine reads a few Kafka RecordBatch v2 fields, laid out by
// batchfmt. The CRC is the Kafka layer's business; baseOffset lies outside
// it.

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
		if len(rest) < batchfmt.HeaderSize {
			return info, fmt.Errorf("%w: short batch at byte %d", ErrBadEntry, p)
		}
		n := int64(batchfmt.BatchLength(rest))
		if n < batchfmt.MinBatchLength || batchfmt.LengthOverhead+n > int64(len(rest)) {
			return info, fmt.Errorf("%w: bad batch length %d at byte %d", ErrBadEntry, n, p)
		}
		if rest[batchfmt.OffMagic] != batchfmt.Magic {
			return info, fmt.Errorf("%w: batch magic %d at byte %d", ErrBadEntry, rest[batchfmt.OffMagic], p)
		}
		d := batchfmt.LastOffsetDelta(rest)
		if d < 0 {
			return info, fmt.Errorf("%w: negative lastOffsetDelta at byte %d", ErrBadEntry, p)
		}
		info.offsets += uint64(d) + 1
		info.maxTs = max(info.maxTs, batchfmt.MaxTimestamp(rest))
		p += int(batchfmt.LengthOverhead + n)
	}
	if info.offsets > math.MaxUint32 {
		return info, fmt.Errorf("%w: entry takes %d offsets", ErrBadEntry, info.offsets)
	}
	return info, nil
}

// StampBatches writes each batch's baseOffset, starting at base, and its
// partitionLeaderEpoch: the entry's Raft term, the stream's leader epoch
// (docs/kafka.md "Leader epochs"). Every replica stamps the same values
// (the term travels with the entry), and neither field is under the
// batch's CRC. data was validated by parseBatches (or built whole by the
// caller: a leader stamps what it proposes, raftnode/stamp.go).
func StampBatches(data []byte, base int64, term uint64) {
	epoch := batchfmt.EpochOfTerm(term)
	for p := 0; p < len(data); {
		batchfmt.SetBaseOffset(data[p:], base)
		batchfmt.SetLeaderEpoch(data[p:], epoch)
		base += int64(batchfmt.LastOffsetDelta(data[p:])) + 1
		p += batchfmt.LengthOverhead + int(batchfmt.BatchLength(data[p:]))
	}
}

// stamped says whether data's batches carry the stamps StampBatches would
// write, from base in term: then they are stored as they are, uncopied
// (chunkMem.borrowed). data was validated by parseBatches.
func stamped(data []byte, base int64, term uint64) bool {
	epoch := batchfmt.EpochOfTerm(term)
	for p := 0; p < len(data); {
		if batchfmt.BaseOffset(data[p:]) != base || batchfmt.LeaderEpoch(data[p:]) != epoch {
			return false
		}
		base += int64(batchfmt.LastOffsetDelta(data[p:])) + 1
		p += batchfmt.LengthOverhead + int(batchfmt.BatchLength(data[p:]))
	}
	return true
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
