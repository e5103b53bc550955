package records

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testRecord is what a client means to send.
type testRecord struct {
	Key, Value []byte
	Ts         int64
	Headers    []kmsg.Header
}

func mkTestRecords(n int, ts int64) []testRecord {
	out := make([]testRecord, n)
	for i := range out {
		out[i] = testRecord{
			Key:   fmt.Appendf(nil, "k%d", i),
			Value: fmt.Appendf(nil, "value-%d-%s", i, string(make([]byte, i%50))),
			Ts:    ts + int64(i),
		}
	}
	if n > 1 {
		out[0].Key = nil        // null key
		out[1].Value = []byte{} // empty, not null
		out[n-1].Headers = []kmsg.Header{{Key: "h", Value: []byte("v")}, {Key: "n", Value: nil}}
	}
	return out
}

// buildV2 encodes records the way franz-go does: kmsg.Record per record,
// compressed records section, kmsg.RecordBatch with CRC-32C over
// attributes..end.
func buildV2(t testing.TB, codec int8, recs []testRecord, attrs int16) []byte {
	t.Helper()
	var raw []byte
	first := recs[0].Ts
	maxTs := first
	for i, r := range recs {
		rec := kmsg.Record{TimestampDelta64: r.Ts - first, OffsetDelta: int32(i), Key: r.Key, Value: r.Value, Headers: r.Headers}
		body := rec.AppendTo(nil) // Length 0 placeholder: 1 byte
		rec.Length = int32(len(body) - 1)
		raw = rec.AppendTo(raw)
		maxTs = max(maxTs, r.Ts)
	}
	payload, err := Compress(codec, raw)
	require.NoError(t, err)
	rb := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2,
		Attributes: int16(codec) | attrs, LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: first, MaxTimestamp: maxTs, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: payload,
	}
	rb.Length = int32(49 + len(payload))
	b := rb.AppendTo(nil)
	rb.CRC = int32(crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return rb.AppendTo(nil)
}

// recrc recomputes a v2 batch CRC after a test tampered with it.
func recrc(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// decodeV2 decodes batches with kmsg (independent of the package's walker)
// and returns records with absolute offsets.
type gotRecord struct {
	Offset     int64
	Ts         int64
	Key, Value []byte
}

func decodeV2(t testing.TB, b []byte) []gotRecord {
	t.Helper()
	var out []gotRecord
	for len(b) > 0 {
		var rb kmsg.RecordBatch
		require.NoError(t, rb.ReadFrom(b))
		size := int(rb.Length) + 12
		require.Equal(t, uint32(rb.CRC), crc32.Checksum(b[21:size], crc32.MakeTable(crc32.Castagnoli)))
		data, err := Decompress(int8(rb.Attributes&7), rb.Records, 1<<30)
		require.NoError(t, err)
		for n := int32(0); n < rb.NumRecords; n++ {
			l, w := binary.Varint(data)
			require.Positive(t, w)
			var r kmsg.Record
			require.NoError(t, r.ReadFrom(data[:w+int(l)]))
			data = data[w+int(l):]
			ts := rb.FirstTimestamp + r.TimestampDelta64
			if rb.Attributes&0x08 != 0 {
				ts = rb.MaxTimestamp
			}
			out = append(out, gotRecord{rb.FirstOffset + int64(r.OffsetDelta), ts, r.Key, r.Value})
		}
		require.Empty(t, data)
		b = b[size:]
	}
	return out
}

// legacy message builders (kmsg types, CRC-32 IEEE over magic..end).
func mkV0(offset int64, attrs int8, key, value []byte) []byte {
	m := kmsg.MessageV0{Offset: offset, Magic: 0, Attributes: attrs, Key: key, Value: value}
	m.MessageSize = int32(len(m.AppendTo(nil)) - 12)
	b := m.AppendTo(nil)
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

func mkV1(offset int64, attrs int8, ts int64, key, value []byte) []byte {
	m := kmsg.MessageV1{Offset: offset, Magic: 1, Attributes: attrs, Timestamp: ts, Key: key, Value: value}
	m.MessageSize = int32(len(m.AppendTo(nil)) - 12)
	b := m.AppendTo(nil)
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

// legacyGot is a legacy message as a 0.10 client resolves it.
type legacyGot struct {
	Offset     int64
	Ts         int64
	Attrs      int8
	Key, Value []byte
}

// decodeMessageSet parses a MessageSet like a pre-0.11 client: magic 1
// wrappers have relative inner offsets (absolute = wrapper - lastInner +
// inner), magic 0 inner offsets are absolute.
func decodeMessageSet(t testing.TB, b []byte) (msgs []legacyGot, wrapperCodecs []int8) {
	t.Helper()
	for len(b) > 0 {
		size := int(binary.BigEndian.Uint32(b[8:])) + 12
		m := b[:size]
		b = b[size:]
		require.Equal(t, binary.BigEndian.Uint32(m[12:]), crc32.ChecksumIEEE(m[16:]), "crc")
		var g legacyGot
		switch m[16] {
		case 0:
			var v kmsg.MessageV0
			require.NoError(t, v.ReadFrom(m))
			g = legacyGot{v.Offset, -1, v.Attributes, v.Key, v.Value}
		case 1:
			var v kmsg.MessageV1
			require.NoError(t, v.ReadFrom(m))
			g = legacyGot{v.Offset, v.Timestamp, v.Attributes, v.Key, v.Value}
		default:
			t.Fatalf("magic %d", m[16])
		}
		codec := g.Attrs & 7
		if codec == 0 {
			msgs = append(msgs, g)
			continue
		}
		wrapperCodecs = append(wrapperCodecs, codec)
		data, err := Decompress(codec, g.Value, 1<<30)
		require.NoError(t, err)
		inner, nested := decodeMessageSet(t, data)
		require.Empty(t, nested)
		require.NotEmpty(t, inner)
		if m[16] == 1 {
			base := g.Offset - inner[len(inner)-1].Offset
			for i := range inner {
				inner[i].Offset += base
			}
		}
		msgs = append(msgs, inner...)
	}
	return msgs, wrapperCodecs
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
