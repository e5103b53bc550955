package records

import (
	"encoding/binary"
	"fmt"
	"math"
)

// minRecordSize is the smallest encoded v2 record: length, attributes,
// timestampDelta, offsetDelta, key length, value length, header count.
const minRecordSize = 7

// record is one v2 record; Key and Value alias the batch (nil means null).
// Headers are skipped: nothing in this package needs them.
type record struct {
	TimestampDelta int64
	OffsetDelta    int32
	Key, Value     []byte
}

// The record walker is hand-written rather than kmsg.Record.ReadFrom because
// that one neither reports how many bytes it consumed nor rejects garbage
// after a record, and it allocates headers; here framing must be exact and
// the walk allocation-free.

func readVarlong(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b) // zigzag, like Kafka's varlong
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func readVarint(b []byte) (int32, []byte, bool) {
	v, rest, ok := readVarlong(b)
	if !ok || v < math.MinInt32 || v > math.MaxInt32 {
		return 0, nil, false
	}
	return int32(v), rest, true
}

// readVarBytes reads a varint-length byte string; -1 is null.
func readVarBytes(b []byte, nullable bool) ([]byte, []byte, bool) {
	l, b, ok := readVarint(b)
	switch {
	case !ok:
		return nil, nil, false
	case l == -1 && nullable:
		return nil, b, true
	case l < 0 || int(l) > len(b):
		return nil, nil, false
	}
	return b[:l:l], b[l:], true
}

// nextRecord decodes the record at the start of b and returns what follows.
func nextRecord(b []byte) (r record, rest []byte, ok bool) {
	l, b, ok := readVarint(b)
	if !ok || l < 0 || int(l) > len(b) {
		return r, nil, false
	}
	body, rest := b[:l], b[l:]
	if len(body) < 1 {
		return r, nil, false
	}
	body = body[1:] // attributes: unused
	if r.TimestampDelta, body, ok = readVarlong(body); !ok {
		return r, nil, false
	}
	if r.OffsetDelta, body, ok = readVarint(body); !ok {
		return r, nil, false
	}
	if r.Key, body, ok = readVarBytes(body, true); !ok {
		return r, nil, false
	}
	if r.Value, body, ok = readVarBytes(body, true); !ok {
		return r, nil, false
	}
	var nh int32
	if nh, body, ok = readVarint(body); !ok || nh < 0 {
		return r, nil, false
	}
	for range nh {
		if _, body, ok = readVarBytes(body, false); !ok { // header key: never null
			return r, nil, false
		}
		if _, body, ok = readVarBytes(body, true); !ok {
			return r, nil, false
		}
	}
	if len(body) != 0 {
		return r, nil, false
	}
	return r, rest, true
}

// batchRecords returns the decoded (decompressed) records section of a
// batch whose header is h, checked to hold exactly RecordCount well-framed
// records with offset deltas strictly increasing within 0..LastOffsetDelta.
func batchRecords(h Header, batch []byte, limit int) ([]byte, error) {
	data, err := Decompress(h.Codec(), batch[HeaderSize:], limit)
	if err != nil {
		return nil, err
	}
	prev := int32(-1)
	n := int32(0)
	for p := data; len(p) > 0; n++ {
		r, rest, ok := nextRecord(p)
		if !ok {
			return nil, fmt.Errorf("%w: record %d is malformed", ErrCorrupt, n)
		}
		if r.OffsetDelta <= prev || r.OffsetDelta > h.LastOffsetDelta {
			return nil, fmt.Errorf("%w: record %d has offset delta %d after %d (last %d)", ErrInvalidRecord, n, r.OffsetDelta, prev, h.LastOffsetDelta)
		}
		prev = r.OffsetDelta
		p = rest
	}
	if n != h.RecordCount {
		return nil, fmt.Errorf("%w: batch holds %d records, header says %d", ErrInvalidRecord, n, h.RecordCount)
	}
	return data, nil
}

// CheckRecords is the deep check ValidateV2 leaves out: it decompresses one
// batch (at most limit bytes) and walks every record, checking framing, the
// record count and offset deltas. It allocates (the decompressed copy) and
// costs per record, so it is not on the default produce path; use it where
// strictness is worth that (tests, a strict-mode config, scrubbing).
func CheckRecords(batch []byte, limit int) error {
	n := nextBatch(batch)
	if n == 0 || n != len(batch) {
		return fmt.Errorf("%w: not exactly one whole v2 batch", ErrCorrupt)
	}
	h, _ := ReadHeader(batch)
	_, err := batchRecords(h, batch, limit)
	return err
}
