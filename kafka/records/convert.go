package records

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxConvertBytes bounds one batch's decompressed records during
// down-conversion. Past it a batch is treated as undecodable (see
// ToMessageSet) rather than failing the fetch.
const maxConvertBytes = 64 << 20

// legacy message attribute bits.
const legacyAttrLogAppendTime = 0x08

// ToMessageSet converts stored v2 batches (with real base offsets) into a
// MessageSet of the given magic for Fetch < v4: magic 0 for Fetch v0–v1,
// magic 1 for Fetch v2–v3. Every message carries its absolute offset.
//
// A compressed batch becomes one compressed wrapper with the same codec
// (magic 1: inner offsets relative, wrapper offset = last absolute offset;
// magic 0: inner offsets absolute), except zstd (not defined before v2) and
// lz4 under magic 0 (pre-0.10 clients expect Kafka 0.9's wrong lz4 header
// checksum), which are emitted uncompressed. Control batches are skipped;
// headers are dropped (MessageSets have none). Under LogAppendTime every
// message gets the batch's MaxTimestamp and the LogAppendTime bit.
//
// It never fails on bytes that ValidateV2 accepted: a batch whose records
// cannot be decoded (ValidateV2 does not parse them) becomes a single
// message with null key and value at the batch's last offset, so old
// consumers move past it instead of re-fetching it forever. Trailing bytes
// that are not a whole batch (a cut fetch) are dropped. The only error is a
// magic other than 0 or 1.
func ToMessageSet(batches []byte, magic int8) ([]byte, error) {
	if magic != 0 && magic != 1 {
		return nil, fmt.Errorf("records: ToMessageSet: magic %d is not a MessageSet", magic)
	}
	out := make([]byte, 0, len(batches)+len(batches)/4)
	var inner []byte
	for h, batch := range Batches(batches) {
		if h.IsControl() {
			continue
		}
		data, err := batchRecords(h, batch, maxConvertBytes)
		if err != nil {
			out = appendLegacy(out, magic, h.LastOffset(), 0, h.MaxTimestamp, nil, nil)
			continue
		}
		codec := h.Codec()
		if codec == CodecZstd || (codec == CodecLZ4 && magic == 0) {
			codec = CodecNone
		}
		var attrs int8
		if h.LogAppendTime() && magic == 1 {
			attrs = legacyAttrLogAppendTime
		}
		if codec == CodecNone {
			out = appendMessages(out, data, h, magic, attrs, false)
			continue
		}
		inner = appendMessages(inner[:0], data, h, magic, attrs, true)
		z, err := Compress(codec, inner)
		if err != nil { // cannot happen with in-memory writers; stay lenient
			out = appendMessages(out, data, h, magic, attrs, false)
			continue
		}
		out = appendLegacy(out, magic, h.LastOffset(), attrs|codec, h.MaxTimestamp, nil, z)
	}
	return out, nil
}

// appendMessages appends one legacy message per record of data (already
// checked by batchRecords). relative gives offset deltas instead of absolute
// offsets (inner messages of a magic-1 wrapper).
func appendMessages(dst, data []byte, h Header, magic, attrs int8, relative bool) []byte {
	for p := data; len(p) > 0; {
		r, rest, _ := nextRecord(p)
		off := h.BaseOffset + int64(r.OffsetDelta)
		if relative && magic == 1 {
			off = int64(r.OffsetDelta)
		}
		ts := h.FirstTimestamp + r.TimestampDelta
		if h.LogAppendTime() {
			ts = h.MaxTimestamp
		}
		dst = appendLegacy(dst, magic, off, attrs, ts, r.Key, r.Value)
		p = rest
	}
	return dst
}

// appendLegacy appends one MessageV0/V1 encoded by kmsg, with its size and
// CRC-32 (IEEE, over magic..end) filled in.
func appendLegacy(dst []byte, magic int8, offset int64, attrs int8, ts int64, key, value []byte) []byte {
	start := len(dst)
	size := int32(4 + 1 + 1 + 4 + len(key) + 4 + len(value))
	if magic == 0 {
		m := kmsg.MessageV0{Offset: offset, MessageSize: size, Magic: 0, Attributes: attrs, Key: key, Value: value}
		dst = m.AppendTo(dst)
	} else {
		m := kmsg.MessageV1{Offset: offset, MessageSize: size + 8, Magic: 1, Attributes: attrs, Timestamp: ts, Key: key, Value: value}
		dst = m.AppendTo(dst)
	}
	crc := crc32.ChecksumIEEE(dst[start+legacyOffMagic:])
	binary.BigEndian.PutUint32(dst[start+legacyOffCRC:], crc)
	return dst
}
