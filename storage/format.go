package storage

// On-disk record and segment-header encoding. docs/storage.md describes
// every byte; keep the two in step.

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	segMagic      = "VDLSEG01"
	segVersion    = 1
	segHeaderSize = 64
	recHeaderSize = 48
	recAlign      = 8
	stateSize     = 40 // state record payload
	// maxPayload bounds one record; the length field is 32 bits.
	maxPayload = 1<<32 - 1 - recHeaderSize - recAlign
)

// Record types (header byte 8).
const (
	recNormal       uint8 = 1 // EntryNormal, payload = Data (no-op, TagCommand, ...)
	recUser         uint8 = 2 // EntryNormal with TagUser, payload = Data[1:] (stamped)
	recConfChange   uint8 = 3
	recConfChangeV2 uint8 = 4
	recState        uint8 = 5 // hard state + applied, not a Raft entry
)

// Record flags (header byte 9): remember which optional protobuf fields the
// entry had, so Entries() returns an entry proto-equal to the one written.
const (
	flagTypeSet uint8 = 1 << 0
	flagDataSet uint8 = 1 << 1
)

var le = binary.LittleEndian

// recHeader is the fixed 48-byte record header.
type recHeader struct {
	crc     uint32
	length  uint32 // payload bytes
	typ     uint8
	flags   uint8
	count   uint32 // Kafka offsets taken (user records), else 0
	term    uint64
	index   uint64 // Raft index; for state records the last entry index
	base    int64  // first offset (user), else the running next offset
	prevCRC uint32 // crc of the previous record: a hash chain
	tag     uint8  // TagUser for user records: Data = record[47:48+length]
}

func recSize(payload int) int64 {
	return (int64(recHeaderSize+payload) + recAlign - 1) &^ (recAlign - 1)
}

// encode writes the header (without crc) into b[:48].
func (h *recHeader) encode(b []byte) {
	_ = b[recHeaderSize-1]
	le.PutUint32(b[4:], h.length)
	b[8] = h.typ
	b[9] = h.flags
	b[10], b[11] = 0, 0
	le.PutUint32(b[12:], h.count)
	le.PutUint64(b[16:], h.term)
	le.PutUint64(b[24:], h.index)
	le.PutUint64(b[32:], uint64(h.base))
	le.PutUint32(b[40:], h.prevCRC)
	b[44], b[45], b[46] = 0, 0, 0
	b[47] = h.tag
}

func decodeRecHeader(b []byte) recHeader {
	_ = b[recHeaderSize-1]
	return recHeader{
		crc:     le.Uint32(b[0:]),
		length:  le.Uint32(b[4:]),
		typ:     b[8],
		flags:   b[9],
		count:   le.Uint32(b[12:]),
		term:    le.Uint64(b[16:]),
		index:   le.Uint64(b[24:]),
		base:    int64(le.Uint64(b[32:])),
		prevCRC: le.Uint32(b[40:]),
		tag:     b[47],
	}
}

// recordCRC covers the stream id, the header after the crc field, and the
// payload: a record copied from another stream or position fails it.
func recordCRC(stream uint64, hdr, payload []byte) uint32 {
	var sb [8]byte
	le.PutUint64(sb[:], stream)
	c := crc32.Update(0, castagnoli, sb[:])
	c = crc32.Update(c, castagnoli, hdr[4:recHeaderSize])
	return crc32.Update(c, castagnoli, payload)
}

// sealRecord computes and stores the crc of the record in rec (header and
// payload, padding excluded) and returns it.
func sealRecord(stream uint64, rec []byte, payloadLen int) uint32 {
	c := recordCRC(stream, rec[:recHeaderSize], rec[recHeaderSize:recHeaderSize+payloadLen])
	le.PutUint32(rec[0:], c)
	return c
}

// headerPlausible is the cheap check before a crc: known type, zero
// reserved bytes, payload within room bytes, tag consistent with type.
func headerPlausible(b []byte, room int64) bool {
	h := decodeRecHeader(b)
	if h.typ < recNormal || h.typ > recState || b[10] != 0 || b[11] != 0 ||
		b[44] != 0 || b[45] != 0 || b[46] != 0 || h.flags&^(flagTypeSet|flagDataSet) != 0 {
		return false
	}
	if (h.typ == recUser) != (h.tag == TagUser) || (h.typ != recUser && h.tag != 0) {
		return false
	}
	if h.typ == recState && h.length != stateSize {
		return false
	}
	return recSize(int(h.length)) <= room
}

// state is the hard state plus what the engine keeps beside it.
type state struct {
	term, vote, commit uint64
	applied            uint64
	maxTs              int64 // running max batch timestamp at this point
}

func (s *state) encode(b []byte) {
	le.PutUint64(b[0:], s.term)
	le.PutUint64(b[8:], s.vote)
	le.PutUint64(b[16:], s.commit)
	le.PutUint64(b[24:], s.applied)
	le.PutUint64(b[32:], uint64(s.maxTs))
}

func decodeState(b []byte) state {
	return state{
		term: le.Uint64(b[0:]), vote: le.Uint64(b[8:]), commit: le.Uint64(b[16:]),
		applied: le.Uint64(b[24:]), maxTs: int64(le.Uint64(b[32:])),
	}
}

// segHeader is the 64-byte header at the start of every segment file.
type segHeader struct {
	stream      uint64
	first       uint64 // Raft index of the first entry
	firstOffset int64  // Kafka offset of the first user record
	prevTerm    uint64 // term of entry first-1
	size        int64  // the segment's size, where it rolls (informational: its file grows to it)
	chainCRC    uint32 // crc of the last record before this segment
}

func (h *segHeader) encode(b []byte) {
	copy(b[0:8], segMagic)
	le.PutUint32(b[8:], segVersion)
	le.PutUint32(b[12:], segHeaderSize)
	le.PutUint64(b[16:], h.stream)
	le.PutUint64(b[24:], h.first)
	le.PutUint64(b[32:], uint64(h.firstOffset))
	le.PutUint64(b[40:], h.prevTerm)
	le.PutUint64(b[48:], uint64(h.size))
	le.PutUint32(b[56:], h.chainCRC)
	le.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
}

func decodeSegHeader(b []byte) (segHeader, bool) {
	if len(b) < segHeaderSize || string(b[0:8]) != segMagic ||
		le.Uint32(b[8:]) != segVersion || le.Uint32(b[12:]) != segHeaderSize ||
		le.Uint32(b[60:]) != crc32.Checksum(b[:60], castagnoli) {
		return segHeader{}, false
	}
	return segHeader{
		stream:      le.Uint64(b[16:]),
		first:       le.Uint64(b[24:]),
		firstOffset: int64(le.Uint64(b[32:])),
		prevTerm:    le.Uint64(b[40:]),
		size:        int64(le.Uint64(b[48:])),
		chainCRC:    le.Uint32(b[56:]),
	}, true
}
