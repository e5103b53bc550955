package producers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// The snapshot of a table: what a replica persists now and then (and
// ships with a Raft snapshot) so that its state after a restart or an
// install is the snapshot plus the log after it, not a replay of the whole
// log. Big-endian:
//
//	"VDLP" | u8 version (1) | u64 index | i64 clock | u32 producers
//	producers × ( i64 id | i16 epoch | i64 last timestamp | u8 batches
//	              batches × ( i32 first seq | i32 last seq | i32 count |
//	                          u64 index | u64 term | i64 delta | i64 offset ) )
//	u32 CRC-32C of everything before it
//
// Producers are in id order and expired ones are left out, so equal tables
// encode to equal bytes. Queued proposals (overlays) are never encoded.

const (
	codecVersion = 1
	headerSize   = 4 + 1 + 8 + 8 + 4
	producerSize = 8 + 2 + 8 + 1
	locSize      = 4 + 4 + 4 + 8 + 8 + 8 + 8
)

var magic = [4]byte{'V', 'D', 'L', 'P'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: a snapshot that does not decode.
var ErrCorrupt = errors.New("producers: corrupt snapshot")

// Encode returns the table's snapshot. t must not be an overlay.
func Encode(t *Table) []byte {
	ids := t.Producers()
	size := headerSize + 4
	for _, id := range ids {
		size += producerSize + locSize*len(t.m[id].Batches)
	}
	b := make([]byte, 0, size)
	b = append(b, magic[:]...)
	b = append(b, codecVersion)
	b = binary.BigEndian.AppendUint64(b, t.Index)
	b = binary.BigEndian.AppendUint64(b, uint64(t.Clock))
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		p := t.m[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(p.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(p.LastTs))
		b = append(b, byte(len(p.Batches)))
		for _, l := range p.Batches {
			b = binary.BigEndian.AppendUint32(b, uint32(l.FirstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(l.LastSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(l.Count))
			b = binary.BigEndian.AppendUint64(b, l.Index)
			b = binary.BigEndian.AppendUint64(b, l.Term)
			b = binary.BigEndian.AppendUint64(b, uint64(l.Delta))
			b = binary.BigEndian.AppendUint64(b, uint64(l.Offset))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Decode parses a snapshot made by Encode.
func Decode(b []byte, expirationMs int64) (*Table, error) {
	bad := func(why string, args ...any) (*Table, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(why, args...))
	}
	if len(b) < headerSize+4 {
		return bad("%d bytes", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch")
	}
	if [4]byte(body[:4]) != magic || body[4] != codecVersion {
		return bad("not a version %d producer snapshot", codecVersion)
	}
	t := New(expirationMs)
	t.Index = binary.BigEndian.Uint64(body[5:])
	t.Clock = int64(binary.BigEndian.Uint64(body[13:]))
	n := binary.BigEndian.Uint32(body[21:])
	p := body[headerSize:]
	if uint64(n) > uint64(len(p))/producerSize {
		return bad("%d producers in %d bytes", n, len(p))
	}
	prev := int64(math.MinInt64)
	for i := uint32(0); i < n; i++ {
		if len(p) < producerSize {
			return bad("truncated producer %d", i)
		}
		id := int64(binary.BigEndian.Uint64(p))
		pr := &Producer{Epoch: int16(binary.BigEndian.Uint16(p[8:])), LastTs: int64(binary.BigEndian.Uint64(p[10:]))}
		k := int(p[18])
		p = p[producerSize:]
		switch {
		case id < 0 || (i > 0 && id <= prev):
			return bad("producer id %d after %d", id, prev)
		case k == 0 || k > Window:
			return bad("producer %d holds %d batches", id, k)
		case len(p) < k*locSize:
			return bad("truncated batches of producer %d", id)
		}
		pr.Batches = make([]Loc, k)
		for j := range pr.Batches {
			pr.Batches[j] = Loc{
				FirstSeq: int32(binary.BigEndian.Uint32(p)),
				LastSeq:  int32(binary.BigEndian.Uint32(p[4:])),
				Count:    int32(binary.BigEndian.Uint32(p[8:])),
				Index:    binary.BigEndian.Uint64(p[12:]),
				Term:     binary.BigEndian.Uint64(p[20:]),
				Delta:    int64(binary.BigEndian.Uint64(p[28:])),
				Offset:   int64(binary.BigEndian.Uint64(p[36:])),
			}
			p = p[locSize:]
		}
		t.set(id, pr)
		prev = id
	}
	if len(p) != 0 {
		return bad("%d trailing bytes", len(p))
	}
	return t, nil
}
