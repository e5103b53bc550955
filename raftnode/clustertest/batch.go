package clustertest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch builds a minimal valid Kafka RecordBatch v2 holding one record per
// value (null keys, no headers), as raftnode.UserData expects.
func Batch(values ...[]byte) []byte {
	var recs []byte
	for i, v := range values {
		var r []byte
		r = append(r, 0)                          // attributes
		r = binary.AppendVarint(r, 0)             // timestamp delta
		r = binary.AppendVarint(r, int64(i))      // offset delta
		r = binary.AppendVarint(r, -1)            // key: null
		r = binary.AppendVarint(r, int64(len(v))) // value length
		r = append(r, v...)
		r = binary.AppendVarint(r, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	n := len(values)
	b := make([]byte, 61, 61+len(recs))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], 0xffffffff)
	b[16] = 2
	binary.BigEndian.PutUint32(b[23:], uint32(n-1))
	binary.BigEndian.PutUint64(b[27:], 1000)
	binary.BigEndian.PutUint64(b[35:], 1000)
	binary.BigEndian.PutUint64(b[43:], ^uint64(0))
	binary.BigEndian.PutUint16(b[51:], 0xffff)
	binary.BigEndian.PutUint32(b[53:], 0xffffffff)
	binary.BigEndian.PutUint32(b[57:], uint32(n))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// IdempotentBatch is Batch with an idempotent producer's fields: producer
// id, epoch and the sequence of its first record.
func IdempotentBatch(pid int64, epoch int16, seq int32, values ...[]byte) []byte {
	b := Batch(values...)
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// Value returns a size-byte value that starts with a unique tag.
func Value(tag string, size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	copy(v, tag)
	return v
}

// KBatch is one Kafka RecordBatch v2 as stored: its base offset, record
// count and bytes.
type KBatch struct {
	Base  int64
	Count int64
	Data  []byte
}

// SplitBatches splits a run of whole v2 batches into single batches.
func SplitBatches(run []byte) ([]KBatch, error) {
	var out []KBatch
	for p := 0; p < len(run); {
		if len(run)-p < 61 {
			return nil, fmt.Errorf("truncated batch header at %d", p)
		}
		size := 12 + int(int32(binary.BigEndian.Uint32(run[p+8:])))
		if size < 61 || p+size > len(run) {
			return nil, fmt.Errorf("bad batch length %d at %d", size, p)
		}
		b := run[p : p+size]
		out = append(out, KBatch{
			Base:  int64(binary.BigEndian.Uint64(b)),
			Count: int64(int32(binary.BigEndian.Uint32(b[23:]))) + 1,
			Data:  b,
		})
		p += size
	}
	return out, nil
}

// Values decodes the record values of a batch built by Batch.
func (b KBatch) Values() ([][]byte, error) {
	var out [][]byte
	p := b.Data[61:]
	for len(p) > 0 {
		l, n := binary.Varint(p)
		if n <= 0 || int(l) > len(p)-n {
			return nil, fmt.Errorf("bad record length")
		}
		r := p[n : n+int(l)]
		p = p[n+int(l):]
		r = r[1:]                // attributes
		for i := 0; i < 3; i++ { // timestamp delta, offset delta, key length (-1)
			_, m := binary.Varint(r)
			if m <= 0 {
				return nil, fmt.Errorf("bad record varint")
			}
			r = r[m:]
		}
		vl, m := binary.Varint(r)
		if m <= 0 || int(vl) > len(r)-m {
			return nil, fmt.Errorf("bad value length")
		}
		out = append(out, r[m:m+int(vl)])
	}
	return out, nil
}
