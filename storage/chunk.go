package storage

import (
	"bytes"

	pb "go.etcd.io/raft/v3/raftpb"
)

// chunkMem is the memory of one write's records, in file order, as the
// pieces vfs.WriteAtv writes. A record with a payload of ownPieceMin bytes
// or more gets a piece of its own, filled by append from its payload: Go
// zeroes a buffer it makes before the copy fills it, and does not zero one
// that append grows (under produce, zeroing the fresh 1 MiB chunk of every
// write took 5% of a leader's CPU and 8% of a follower's). Smaller records
// share one made buffer, each run of them between large ones one piece.
// A user record whose batches carry their stamps already (a leader stamps
// what it proposes: raftnode/stamp.go) is not copied at all: its payload
// is the entry's own bytes (borrowed). The tail cache keeps slices of the
// pieces: they are never reused, and an entry's bytes are never changed
// once written.
type chunkMem struct {
	pieces [][]byte
	small  []byte // the small records' buffer; used: its first bytes
	used   int
	inRun  bool // the last piece is a run of small records ending at used
}

// ownPieceMin is the payload size from which a record has a piece of its
// own: from here on allocations are whole pages, whose rounding leaves
// room for the padding almost always.
const ownPieceMin = 32 << 10

// newChunkMem sizes the shared buffer for smallBytes of small records.
func newChunkMem(smallBytes int) chunkMem {
	return chunkMem{small: make([]byte, smallBytes)}
}

// ownsPiece says whether a record with an n-byte payload gets its own piece.
func ownsPiece(n int) bool { return n >= ownPieceMin }

// own returns the next record, of sz bytes (sz = recSize(len(payload))),
// with payload already in place after the header's room and the padding
// zero: a piece of its own.
func (c *chunkMem) own(payload []byte, sz int) []byte {
	var room [recHeaderSize]byte
	rec := append(room[:], payload...) // the header is encoded over room
	if cap(rec) < sz {
		rec = append(rec, make([]byte, sz-len(rec))...) // no room left for the padding: rare
	}
	rec = rec[:sz:sz] // beyond what append copied, Go zeroed
	c.pieces, c.inRun = append(c.pieces, rec), false
	return rec
}

// borrowed adds a record whose payload is the caller's, uncopied: data is
// the entry's bytes, its tag then the payload, and the tag is the header's
// last byte, so the record is the header's other bytes and the padding
// from the shared buffer around data itself. It returns the header's
// room (recHeaderSize bytes of the shared buffer, the last not written).
// sz is the record's size (recSize of the payload).
func (c *chunkMem) borrowed(data []byte, sz int) (hdr []byte) {
	hdr = c.shared(recHeaderSize)
	last := &c.pieces[len(c.pieces)-1]
	*last = (*last)[:len(*last)-1] // the tag is written as data's first byte
	c.pieces, c.inRun = append(c.pieces, data), false
	if pad := sz - recHeaderSize - (len(data) - 1); pad > 0 {
		c.shared(pad) // zeroed
	}
	return hdr
}

// planChunk decides which of items [i, j) of a write are borrowed (user
// records of ownPieceMin bytes or more whose batches carry the stamps the
// storage would write, from next on) and returns the bytes the shared
// buffer needs: small records whole, the headers and padding of borrowed
// ones. Item len(prep) is the state record.
func planChunk(ents []*pb.Entry, prep []prepEnt, i, j int, next int64) (smallBytes int) {
	for k := i; k < j; k++ {
		if k == len(prep) {
			smallBytes += int(recSize(stateSize))
			continue
		}
		p := &prep[k]
		n := len(p.payload)
		p.borrow = p.typ == recUser && ownsPiece(n) && stamped(p.payload, next, ents[k].GetTerm())
		switch {
		case p.borrow:
			smallBytes += int(recSize(n)) - n // the header's room and the padding
		case !ownsPiece(n):
			smallBytes += int(recSize(n))
		}
		if p.typ == recUser {
			next += int64(p.info.offsets)
		}
	}
	return smallBytes
}

// shared returns the next record, of sz zeroed bytes of the shared buffer.
func (c *chunkMem) shared(sz int) []byte {
	rec := c.small[c.used : c.used+sz : c.used+sz]
	if c.inRun {
		last := &c.pieces[len(c.pieces)-1]
		*last = (*last)[:len(*last)+sz]
	} else {
		c.pieces, c.inRun = append(c.pieces, c.small[c.used:c.used+sz]), true
	}
	c.used += sz
	return rec
}

// joined is the pieces as one buffer (the torn-write failpoint's).
func (c *chunkMem) joined() []byte { return bytes.Join(c.pieces, nil) }
