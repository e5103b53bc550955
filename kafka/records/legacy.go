package records

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// Layout of a legacy (magic 0/1) message: offset, size, then the CRC-32
// (IEEE) over magic..end.
const (
	legacyOffSize     = 8
	legacyOffCRC      = 12
	legacyOffMagic    = 16
	legacyOffAttrs    = 17
	legacyLogOverhead = 12                  // offset + size
	legacyMinSizeV0   = 4 + 1 + 1 + 4 + 4   // crc magic attrs keylen valuelen
	legacyMinSizeV1   = legacyMinSizeV0 + 8 // + timestamp
)

// legacyMessage is one decoded MessageV0/V1; Key and Value alias the input.
type legacyMessage struct {
	Magic, Attrs int8
	Timestamp    int64 // -1 for magic 0
	Key, Value   []byte
}

func (m legacyMessage) codec() int8 { return m.Attrs & attrCodecMask }

// nextLegacy decodes the message at the start of b (kmsg does the field
// decoding) after checking its framing and CRC. The offset is not returned:
// produced offsets are always renumbered.
func nextLegacy(b []byte, maxSize int) (m legacyMessage, rest []byte, err error) {
	if len(b) < legacyLogOverhead {
		return m, nil, fmt.Errorf("%w: partial message (%d bytes)", ErrCorrupt, len(b))
	}
	size := int32(binary.BigEndian.Uint32(b[legacyOffSize:]))
	if size < legacyMinSizeV0 {
		return m, nil, fmt.Errorf("%w: message size %d", ErrCorrupt, size)
	}
	if int64(size) > int64(len(b)-legacyLogOverhead) {
		return m, nil, fmt.Errorf("%w: partial message (%d of %d bytes)", ErrCorrupt, len(b)-legacyLogOverhead, size)
	}
	if int64(size)+legacyLogOverhead > int64(maxSize) {
		return m, nil, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrTooLarge, int64(size)+legacyLogOverhead, maxSize)
	}
	msg, rest := b[:legacyLogOverhead+int(size)], b[legacyLogOverhead+int(size):]
	if crc32.ChecksumIEEE(msg[legacyOffMagic:]) != binary.BigEndian.Uint32(msg[legacyOffCRC:]) {
		return m, nil, fmt.Errorf("%w: message CRC-32 mismatch", ErrCorrupt)
	}
	var used int
	switch msg[legacyOffMagic] {
	case 0:
		var v kmsg.MessageV0
		if v.ReadFrom(msg) != nil {
			return m, nil, fmt.Errorf("%w: malformed magic 0 message", ErrCorrupt)
		}
		m = legacyMessage{Magic: 0, Attrs: v.Attributes, Timestamp: -1, Key: v.Key, Value: v.Value}
		used = legacyMinSizeV0 + len(v.Key) + len(v.Value)
	case 1:
		var v kmsg.MessageV1
		if size < legacyMinSizeV1 || v.ReadFrom(msg) != nil {
			return m, nil, fmt.Errorf("%w: malformed magic 1 message", ErrCorrupt)
		}
		m = legacyMessage{Magic: 1, Attrs: v.Attributes, Timestamp: v.Timestamp, Key: v.Key, Value: v.Value}
		used = legacyMinSizeV1 + len(v.Key) + len(v.Value)
	default:
		return m, nil, fmt.Errorf("%w: magic %d in a MessageSet", ErrCorrupt, msg[legacyOffMagic])
	}
	if used != int(size) { // kmsg ignores trailing bytes; a message has none
		return m, nil, fmt.Errorf("%w: message size %d, fields use %d", ErrCorrupt, size, used)
	}
	return m, rest, nil
}

// FromMessageSet converts the records of one partition of a legacy Produce
// (v0–v2) request — a MessageSet of magic 0/1 messages — into v2 batches
// ready for storage, with the same keys, values and order. Input offsets are
// ignored: records are renumbered 0..n-1 across the output (base offsets are
// relative to the first record; storage stamps real ones).
//
// Runs of uncompressed messages become uncompressed batches, split so each
// stays within maxBatchBytes. Each compressed wrapper becomes one batch with
// the same codec (gzip, snappy, lz4; lz4 may carry Kafka 0.9's wrong header
// checksum), re-compressed from its inner messages; zstd is not defined for
// MessageSets (ErrUnsupportedCompression). Inner offsets (relative in magic
// 1, absolute in magic 0) are ignored like outer ones.
//
// Timestamps: magic 1 keeps each message's timestamp; a magic-1 wrapper with
// the LogAppendTime bit gives its own timestamp to every inner message (that
// is what a consumer would have seen); magic 0 has none, so records get -1
// (Kafka's NO_TIMESTAMP). Output batches are always CreateTime: VDL does not
// stamp append times. Producer id/epoch/sequence are -1 and
// partitionLeaderEpoch -1, as a non-idempotent producer writes them.
//
// Limits: a message (wrapper included) over maxBatchBytes → ErrTooLarge, as
// Kafka's message.max.bytes; more than maxDecompressedBytes of decompressed
// data in total → ErrTooLarge (bombs stop there). Every CRC-32 is checked
// (ErrCorrupt), and so is framing: a partial trailing message is ErrCorrupt
// for produce.
func FromMessageSet(b []byte, maxBatchBytes, maxDecompressedBytes int) ([]byte, Info, error) {
	info := Info{MaxTimestamp: -1}
	if len(b) == 0 {
		return nil, info, fmt.Errorf("%w: no messages", ErrInvalidRecord)
	}
	c := converter{out: make([]byte, 0, len(b)+len(b)/8+HeaderSize), info: info}
	budget := maxDecompressedBytes
	for p := b; len(p) > 0; {
		m, rest, err := nextLegacy(p, maxBatchBytes)
		if err != nil {
			return nil, c.info, err
		}
		p = rest
		if m.codec() == CodecNone {
			// Split runs to keep batches within maxBatchBytes; the
			// timestamp delta is counted at its widest (10 bytes).
			size := recordSize(0, c.run.n, m.Key, m.Value) + 10
			if c.run.n > 0 && HeaderSize+len(c.run.recs)+size > maxBatchBytes {
				_ = c.flush(CodecNone)
			}
			c.run.add(m.Timestamp, m.Key, m.Value)
			continue
		}
		_ = c.flush(CodecNone) // uncompressed flushes cannot fail
		codec := m.codec()
		if codec >= CodecZstd {
			return nil, c.info, fmt.Errorf("%w: codec %d in a magic %d message", ErrUnsupportedCompression, codec, m.Magic)
		}
		if m.Value == nil {
			return nil, c.info, fmt.Errorf("%w: compressed wrapper with null value", ErrCorrupt)
		}
		data, err := Decompress(codec, m.Value, budget)
		if err != nil {
			return nil, c.info, err
		}
		budget -= len(data)
		for q := data; len(q) > 0; {
			im, rest, err := nextLegacy(q, len(q))
			if err != nil {
				return nil, c.info, fmt.Errorf("inner message: %w", err)
			}
			q = rest
			if im.codec() != CodecNone {
				return nil, c.info, fmt.Errorf("%w: nested compression", ErrInvalidRecord)
			}
			ts := im.Timestamp
			if m.Magic == 1 && m.Attrs&legacyAttrLogAppendTime != 0 {
				ts = m.Timestamp
			}
			c.run.add(ts, im.Key, im.Value)
		}
		if c.run.n == 0 {
			return nil, c.info, fmt.Errorf("%w: compressed wrapper with no messages", ErrInvalidRecord)
		}
		if err := c.flush(codec); err != nil {
			return nil, c.info, err
		}
	}
	_ = c.flush(CodecNone)
	c.info.Bytes = len(c.out)
	return c.out, c.info, nil
}

// converter accumulates records into one batch at a time.
type converter struct {
	out  []byte
	run  v2Builder
	next int64 // relative offset of the next batch's first record
	info Info
}

// flush appends the pending records as one batch compressed with codec.
func (c *converter) flush(codec int8) error {
	if c.run.n == 0 {
		return nil
	}
	var err error
	if c.out, err = c.run.appendBatch(c.out, c.next, codec); err != nil {
		return err
	}
	c.next += int64(c.run.n)
	c.info.Batches++
	c.info.Records += int64(c.run.n)
	c.info.Codecs |= 1 << codec
	c.info.MaxTimestamp = max(c.info.MaxTimestamp, c.run.maxTs)
	c.run.reset()
	return nil
}

// v2Builder encodes records (with kmsg) into a records section.
type v2Builder struct {
	recs           []byte
	n              int32
	firstTs, maxTs int64
}

func (bl *v2Builder) reset() { bl.recs, bl.n = bl.recs[:0], 0 }

func (bl *v2Builder) add(ts int64, key, value []byte) {
	if bl.n == 0 {
		bl.firstTs, bl.maxTs = ts, ts
	}
	bl.maxTs = max(bl.maxTs, ts)
	r := kmsg.Record{
		TimestampDelta64: ts - bl.firstTs,
		OffsetDelta:      bl.n,
		Key:              key,
		Value:            value,
	}
	r.Length = int32(recordBodySize(r.TimestampDelta64, r.OffsetDelta, key, value))
	bl.recs = r.AppendTo(bl.recs)
	bl.n++
}

// appendBatch appends the records as one v2 batch (kmsg.RecordBatch) with
// its CRC-32C filled in.
func (bl *v2Builder) appendBatch(dst []byte, base int64, codec int8) ([]byte, error) {
	payload := bl.recs
	if codec != CodecNone {
		var err error
		if payload, err = Compress(codec, bl.recs); err != nil {
			return dst, err
		}
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          base,
		Length:               int32(batchfmt.MinBatchLength + len(payload)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(codec),
		LastOffsetDelta:      bl.n - 1,
		FirstTimestamp:       bl.firstTs,
		MaxTimestamp:         bl.maxTs,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           bl.n,
		Records:              payload,
	}
	start := len(dst)
	dst = rb.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start+batchfmt.OffCRC:], crc32.Checksum(dst[start+batchfmt.OffAttributes:], castagnoli))
	return dst, nil
}

// varintLen is the size of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

func varBytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// recordBodySize is a record's size after its length prefix.
func recordBodySize(tsDelta int64, offDelta int32, key, value []byte) int {
	return 1 + varintLen(tsDelta) + varintLen(int64(offDelta)) + varBytesLen(key) + varBytesLen(value) + varintLen(0)
}

// recordSize is a record's whole encoded size.
func recordSize(tsDelta int64, offDelta int32, key, value []byte) int {
	n := recordBodySize(tsDelta, offDelta, key, value)
	return varintLen(int64(n)) + n
}
