package records

import (
	"encoding/binary"
	"hash/crc32"
	"iter"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// The layout of the fixed RecordBatch v2 header is batchfmt's.

// HeaderSize is the bytes of a v2 batch before its first record.
const HeaderSize = batchfmt.HeaderSize

// Attribute bits of a v2 batch.
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Header is the fixed part of a RecordBatch v2, read with encoding/binary only.
type Header struct {
	BaseOffset           int64
	BatchLength          int32 // bytes after this field; the batch is BatchLength+12 bytes
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordCount          int32
}

// ReadHeader decodes the header at the start of b; ok is false when b is
// shorter than HeaderSize. It checks nothing else.
func ReadHeader(b []byte) (h Header, ok bool) {
	if len(b) < HeaderSize {
		return h, false
	}
	be := binary.BigEndian
	return Header{
		BaseOffset:           int64(be.Uint64(b[batchfmt.OffBaseOffset:])),
		BatchLength:          int32(be.Uint32(b[batchfmt.OffBatchLength:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[batchfmt.OffLeaderEpoch:])),
		Magic:                int8(b[batchfmt.OffMagic]),
		CRC:                  be.Uint32(b[batchfmt.OffCRC:]),
		Attributes:           int16(be.Uint16(b[batchfmt.OffAttributes:])),
		LastOffsetDelta:      int32(be.Uint32(b[batchfmt.OffLastOffsetDelta:])),
		FirstTimestamp:       int64(be.Uint64(b[batchfmt.OffFirstTimestamp:])),
		MaxTimestamp:         int64(be.Uint64(b[batchfmt.OffMaxTimestamp:])),
		ProducerID:           int64(be.Uint64(b[batchfmt.OffProducerID:])),
		ProducerEpoch:        int16(be.Uint16(b[batchfmt.OffProducerEpoch:])),
		BaseSequence:         int32(be.Uint32(b[batchfmt.OffBaseSequence:])),
		RecordCount:          int32(be.Uint32(b[batchfmt.OffRecordCount:])),
	}, true
}

// Size is the whole batch's size in bytes.
func (h Header) Size() int64 { return int64(h.BatchLength) + batchfmt.LengthOverhead }

// LastOffset is the offset of the batch's last record.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset that follows this batch.
func (h Header) NextOffset() int64 { return h.LastOffset() + 1 }

// Codec is the compression codec (CodecNone … CodecZstd, or an unknown id).
func (h Header) Codec() int8 { return int8(h.Attributes & attrCodecMask) }

// LogAppendTime reports whether MaxTimestamp stands for every record.
func (h Header) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// IsTransactional reports the transactional bit.
func (h Header) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// IsControl reports the control bit.
func (h Header) IsControl() bool { return h.Attributes&attrControl != 0 }

// nextBatch returns the size of the whole batch at the start of b, or 0 when
// b does not start with a whole, plausibly framed v2 batch.
func nextBatch(b []byte) int {
	if len(b) < HeaderSize || b[batchfmt.OffMagic] != batchfmt.Magic {
		return 0
	}
	l := int32(binary.BigEndian.Uint32(b[batchfmt.OffBatchLength:]))
	if l < batchfmt.MinBatchLength || int64(l)+batchfmt.LengthOverhead > int64(len(b)) {
		return 0
	}
	return int(l) + batchfmt.LengthOverhead
}

// Batches yields each whole v2 batch at the start of b with its header. It
// stops at the first incomplete or implausibly framed batch (a fetch may end
// in a partial batch); Split tells where that is. No CRC is checked: storage
// holds bytes that ValidateV2 accepted.
func Batches(b []byte) iter.Seq2[Header, []byte] {
	return func(yield func(Header, []byte) bool) {
		for {
			n := nextBatch(b)
			if n == 0 {
				return
			}
			h, _ := ReadHeader(b)
			if !yield(h, b[:n:n]) {
				return
			}
			b = b[n:]
		}
	}
}

// Split returns the longest prefix of b made of whole batches, and the rest.
func Split(b []byte) (whole, rest []byte) {
	off := 0
	for {
		n := nextBatch(b[off:])
		if n == 0 {
			return b[:off], b[off:]
		}
		off += n
	}
}

// FindOffset returns the byte position in b of the first whole batch whose
// last offset is ≥ offset — the batch a Fetch at offset must start with,
// since Kafka returns the whole batch containing the requested offset. ok
// is false if no whole batch in b reaches offset.
func FindOffset(b []byte, offset int64) (pos int, ok bool) {
	be := binary.BigEndian
	for {
		n := nextBatch(b[pos:])
		if n == 0 {
			return pos, false
		}
		last := int64(be.Uint64(b[pos:])) + int64(int32(be.Uint32(b[pos+batchfmt.OffLastOffsetDelta:])))
		if last >= offset {
			return pos, true
		}
		pos += n
	}
}

// StampBaseOffsets writes consecutive base offsets into the whole batches of
// b, starting at first, and returns the offset after the last record. It
// leaves the CRC valid (baseOffset is outside it). Bytes after the last whole
// batch are left alone.
func StampBaseOffsets(b []byte, first int64) (next int64) {
	next = first
	for len(b) > 0 {
		n := nextBatch(b)
		if n == 0 {
			break
		}
		binary.BigEndian.PutUint64(b[batchfmt.OffBaseOffset:], uint64(next))
		next += int64(int32(binary.BigEndian.Uint32(b[batchfmt.OffLastOffsetDelta:]))) + 1
		b = b[n:]
	}
	return next
}

// Wrap wraps n records, already encoded (kmsg.Record.AppendTo), in an
// uncompressed RecordBatch v2 timestamped ts: what VDL's own writers (the
// group coordinator, the config servers) append to a log.
func Wrap(recs []byte, n int, ts int64) []byte {
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[batchfmt.OffBatchLength:], uint32(len(out)-batchfmt.LengthOverhead))
	binary.BigEndian.PutUint32(out[batchfmt.OffCRC:], crc32.Checksum(out[batchfmt.OffAttributes:], castagnoli))
	return out
}
