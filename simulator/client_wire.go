package simulator

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vdl-project/vdl/checker"
)

// The simulated clients' wire: request frames and record batches as a
// Kafka client sends them, and the records a fetch returns.

// encodeRequest builds a request frame (length prefix included).
func encodeRequest(req kmsg.Request, corr int32, clientID string) []byte {
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b[4:]
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// makeBatch builds one uncompressed RecordBatch v2 holding value.
func makeBatch(ts int64, value string) []byte {
	r := kmsg.Record{Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{
		Magic: 2, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil),
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// makeIdempotentBatch is makeBatch from an idempotent producer.
func makeIdempotentBatch(ts int64, value string, pid int64, epoch int16, seq int32) []byte {
	out := makeBatch(ts, value)
	binary.BigEndian.PutUint64(out[43:], uint64(pid))
	binary.BigEndian.PutUint16(out[51:], uint16(epoch))
	binary.BigEndian.PutUint32(out[53:], uint32(seq))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// decodeRecords returns the records (offset, value) of whole uncompressed
// v2 batches.
func decodeRecords(b []byte) []checker.Record {
	var out []checker.Record
	for len(b) >= 61 {
		n := int(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		if n > len(b) {
			break
		}
		var rb kmsg.RecordBatch
		if rb.ReadFrom(b[:n]) != nil {
			break
		}
		data := rb.Records
		for i := int32(0); i < rb.NumRecords && len(data) > 0; i++ {
			l, m := binary.Varint(data)
			if m <= 0 || m+int(l) > len(data) {
				break
			}
			var r kmsg.Record
			if r.ReadFrom(data[:m+int(l)]) != nil {
				break
			}
			out = append(out, checker.Record{Offset: rb.FirstOffset + int64(r.OffsetDelta), Value: string(r.Value)})
			data = data[m+int(l):]
		}
		b = b[n:]
	}
	return out
}
