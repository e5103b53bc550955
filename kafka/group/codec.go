package group

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vdl-project/vdl/kafka/records"
)

// The offsets log. Committed offsets are stored as ordinary Kafka records
// (RecordBatch v2, uncompressed) in an internal stream replicated by Raft:
// one record per committed partition, key = (group, topic, partition),
// value = (offset, leader epoch, metadata, commit time), a null value
// deleting the key (reserved; not written today). The latest record of a key
// wins; replaying the stream from its start rebuilds the table.
//
//	key   = int8 version (1) | string group | string topic | int32 partition
//	value = int8 version (1) | int64 offset | int32 leader epoch |
//	        string metadata | int64 commit time (ms)
//	      | int8 version (2) | the same | int64 origin
//
// string = uint16 length | bytes (metadata: uint32 length | bytes).
//
// Compaction (Groups): the log only grows with commits, so the coordinator
// now and then writes a checkpoint — every key's latest commit again, as
// version 2 values naming the log offset of the commit they repeat
// (origin) — and then deletes the log before what the checkpoint covers.
// A checkpoint record applies as its origin (Coordinator.ApplyOffset keeps
// the latest by log offset), so a commit made while the checkpoint was
// written is never overwritten by the older value the checkpoint repeats.
//
// Producer id blocks share the stream (kafka.ProducerIDs): a record whose
// key is producerIDKey allocates the block of ids named by its offset.
// The coordinator skips them.
//
//	key   = int8 version (100) | "producer-id-block"
//	value = int8 version (1) | int32 block size

const (
	recordVersion     = 1
	checkpointVersion = 2
	// producerIDKeyVersion marks a producer id block record.
	producerIDKeyVersion = 100
)

var producerIDKey = append([]byte{producerIDKeyVersion}, "producer-id-block"...)

// EncodeProducerIDBlock returns one RecordBatch v2 holding a producer id
// block record of size ids, timestamped ts (ms).
func EncodeProducerIDBlock(size int32, ts int64) []byte {
	v := binary.BigEndian.AppendUint32([]byte{1}, uint32(size))
	r := kmsg.Record{Key: producerIDKey, Value: v}
	r.Length = int32(recordBodyLen(r))
	return records.Wrap(r.AppendTo(nil), 1, ts)
}

// Commit is one offset to write.
type Commit struct {
	Key    OffsetKey
	Offset Offset
}

// EncodeCommits returns one RecordBatch v2 carrying commits (base offset 0;
// the log stamps it), timestamped ts (ms).
func EncodeCommits(commits []Commit, ts int64) []byte {
	var recs []byte
	for i, c := range commits {
		r := kmsg.Record{OffsetDelta: int32(i), Key: encodeKey(c.Key), Value: encodeValue(c.Offset)}
		r.Length = int32(recordBodyLen(r))
		recs = r.AppendTo(recs)
	}
	return records.Wrap(recs, len(commits), ts)
}

func varintLen(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}

// recordBodyLen is the encoded size of r after its length varint.
func recordBodyLen(r kmsg.Record) int {
	r.Length = 0
	full := r.AppendTo(nil)
	return len(full) - varintLen(0)
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func encodeKey(k OffsetKey) []byte {
	b := []byte{recordVersion}
	b = appendStr(b, k.Group)
	b = appendStr(b, k.Topic)
	return binary.BigEndian.AppendUint32(b, uint32(k.Partition))
}

// EncodeCheckpoint returns the batches (each at most about maxBytes) that
// repeat entries — latest commits with their LogOffset — timestamped ts.
func EncodeCheckpoint(entries []OffsetEntry, ts int64, maxBytes int) [][]byte {
	var out [][]byte
	var recs []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		out = append(out, records.Wrap(recs, n, ts))
		recs, n = nil, 0
	}
	for _, e := range entries {
		v := append(encodeValue(e.Offset), 0, 0, 0, 0, 0, 0, 0, 0)
		v[0] = checkpointVersion
		binary.BigEndian.PutUint64(v[len(v)-8:], uint64(e.LogOffset))
		r := kmsg.Record{OffsetDelta: int32(n), Key: encodeKey(e.OffsetKey), Value: v}
		r.Length = int32(recordBodyLen(r))
		recs = r.AppendTo(recs)
		n++
		if len(recs) >= maxBytes {
			flush()
		}
	}
	flush()
	return out
}

func encodeValue(o Offset) []byte {
	b := []byte{recordVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(o.Offset))
	b = binary.BigEndian.AppendUint32(b, uint32(o.LeaderEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(len(o.Metadata)))
	b = append(b, o.Metadata...)
	return binary.BigEndian.AppendUint64(b, uint64(o.CommitTime))
}

var errBadRecord = errors.New("group: malformed offsets record")

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) n(k int) []byte {
	if r.bad || len(r.b) < k {
		r.bad = true
		return make([]byte, k)
	}
	v := r.b[:k]
	r.b = r.b[k:]
	return v
}
func (r *reader) u16() int     { return int(binary.BigEndian.Uint16(r.n(2))) }
func (r *reader) u32() uint32  { return binary.BigEndian.Uint32(r.n(4)) }
func (r *reader) u64() uint64  { return binary.BigEndian.Uint64(r.n(8)) }
func (r *reader) str() string  { return string(r.n(r.u16())) }
func (r *reader) lstr() string { return string(r.n(int(r.u32()))) }

func decodeKey(b []byte) (OffsetKey, error) {
	r := &reader{b: b}
	if v := r.n(1)[0]; v != recordVersion {
		return OffsetKey{}, fmt.Errorf("%w: key version %d", errBadRecord, v)
	}
	k := OffsetKey{Group: r.str(), Topic: r.str(), Partition: int32(r.u32())}
	if r.bad {
		return OffsetKey{}, errBadRecord
	}
	return k, nil
}

// decodeValue decodes a value; origin is the log offset of the commit a
// checkpoint record repeats (-1 for a commit record).
func decodeValue(b []byte) (o Offset, origin int64, err error) {
	r := &reader{b: b}
	v := r.n(1)[0]
	if v != recordVersion && v != checkpointVersion {
		return Offset{}, -1, fmt.Errorf("%w: value version %d", errBadRecord, v)
	}
	o = Offset{Offset: int64(r.u64()), LeaderEpoch: int32(r.u32()), Metadata: r.lstr(), CommitTime: int64(r.u64())}
	origin = -1
	if v == checkpointVersion {
		origin = int64(r.u64())
	}
	if r.bad || origin < -1 {
		return Offset{}, -1, errBadRecord
	}
	return o, origin, nil
}

// DecodeBatches calls fn for every record of the stored v2 batches in data
// (uncompressed, as EncodeCommits and EncodeCheckpoint write them), with
// its position in the log and the log offset of the commit it stands for
// (its position, or a checkpoint record's origin); a nil offset is a
// deletion. Records that do not decode are skipped and counted.
func DecodeBatches(data []byte, fn func(pos, logOffset int64, k OffsetKey, o *Offset)) (bad int, err error) {
	for len(data) > 0 {
		if len(data) < 12 {
			return bad, fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(data))
		}
		n := int(int32(binary.BigEndian.Uint32(data[8:]))) + 12
		if n < 61 || n > len(data) {
			return bad, fmt.Errorf("%w: batch length %d", errBadRecord, n)
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(data[:n]); err != nil {
			return bad, fmt.Errorf("%w: %v", errBadRecord, err)
		}
		data = data[n:]
		if rb.Attributes&0x07 != 0 || rb.Attributes&0x20 != 0 {
			bad += int(rb.NumRecords) // not ours: compressed or control
			continue
		}
		recs := rb.Records
		for i := int32(0); i < rb.NumRecords; i++ {
			l, m := binary.Varint(recs)
			if m <= 0 || l < 0 || int(l) > len(recs)-m {
				bad++
				break
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:m+int(l)]); err != nil {
				bad++
				break
			}
			recs = recs[m+int(l):]
			if len(r.Key) > 0 && r.Key[0] == producerIDKeyVersion {
				continue // a producer id block: not an offset
			}
			k, err := decodeKey(r.Key)
			if err != nil {
				bad++
				continue
			}
			pos := rb.FirstOffset + int64(r.OffsetDelta)
			if r.Value == nil {
				fn(pos, pos, k, nil)
				continue
			}
			o, origin, err := decodeValue(r.Value)
			if err != nil {
				bad++
				continue
			}
			if origin >= 0 {
				fn(pos, origin, k, &o) // a checkpoint's repeat of an earlier commit
				continue
			}
			fn(pos, pos, k, &o)
		}
	}
	return bad, nil
}
