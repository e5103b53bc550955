package records

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

var allCodecs = []int8{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

func TestValidateV2AcceptsEveryCodec(t *testing.T) {
	var req []byte
	for i, c := range allCodecs {
		req = append(req, buildV2(t, c, mkTestRecords(10+i, 1000*int64(i)), 0)...)
	}
	info, err := ValidateV2(req, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 5, info.Batches)
	require.EqualValues(t, 10+11+12+13+14, info.Records)
	require.EqualValues(t, 4000+13, info.MaxTimestamp)
	require.Equal(t, len(req), info.Bytes)
	for _, c := range allCodecs {
		require.True(t, info.Codecs.Has(c))
	}
	for h, b := range Batches(req) {
		require.NoError(t, CheckRecords(b, 1<<20), "codec %d", h.Codec())
	}
	require.Len(t, decodeV2(t, req), 60)
}

// Clients put anything in the fields the broker owns; none is checked.
func TestValidateV2IgnoresBrokerOwnedFields(t *testing.T) {
	b := buildV2(t, CodecNone, mkTestRecords(3, 5), 0)
	binary.BigEndian.PutUint64(b[batchfmt.OffBaseOffset:], 12345)
	binary.BigEndian.PutUint32(b[batchfmt.OffLeaderEpoch:], 0) // sarama sends 0, franz-go -1
	// producer id/epoch/sequence are inside the CRC: set them and re-CRC.
	binary.BigEndian.PutUint64(b[batchfmt.OffProducerID:], 77)
	binary.BigEndian.PutUint16(b[batchfmt.OffProducerEpoch:], 3)
	binary.BigEndian.PutUint32(b[batchfmt.OffBaseSequence:], 9)
	_, err := ValidateV2(recrc(b), 1<<20)
	require.NoError(t, err)
	// LogAppendTime set by a client is accepted as sent.
	_, err = ValidateV2(buildV2(t, CodecNone, mkTestRecords(3, 5), attrLogAppendTime), 1<<20)
	require.NoError(t, err)
}

func TestValidateV2Rejects(t *testing.T) {
	good := func() []byte { return buildV2(t, CodecGzip, mkTestRecords(4, 1), 0) }
	set32 := func(off int, v uint32, crc bool) []byte {
		b := good()
		binary.BigEndian.PutUint32(b[off:], v)
		if crc {
			recrc(b)
		}
		return b
	}
	setAttrs := func(a uint16) []byte {
		b := good()
		binary.BigEndian.PutUint16(b[batchfmt.OffAttributes:], a)
		return recrc(b)
	}
	twice := append(good(), good()...)
	cases := []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"empty", nil, 1 << 20, ErrInvalidRecord},
		{"truncated header", good()[:40], 1 << 20, ErrCorrupt},
		{"few bytes", good()[:5], 1 << 20, ErrCorrupt},
		{"truncated body", good()[:len(good())-1], 1 << 20, ErrCorrupt},
		{"trailing garbage", append(good(), 0, 0, 0), 1 << 20, ErrCorrupt},
		{"partial second batch", twice[:len(twice)-3], 1 << 20, ErrCorrupt},
		{"negative length", set32(batchfmt.OffBatchLength, 0xFFFFFFFF, false), 1 << 20, ErrCorrupt},
		{"huge length", set32(batchfmt.OffBatchLength, 0x7FFFFFFF, false), 1 << 20, ErrCorrupt},
		{"length below header", set32(batchfmt.OffBatchLength, 48, false), 1 << 20, ErrCorrupt},
		{"bad crc", set32(batchfmt.OffCRC, 1, false), 1 << 20, ErrCorrupt},
		{"flipped payload bit", func() []byte { b := good(); b[len(b)-1] ^= 1; return b }(), 1 << 20, ErrCorrupt},
		{"magic 1", func() []byte { b := good(); b[batchfmt.OffMagic] = 1; return b }(), 1 << 20, ErrInvalidRecord},
		{"magic 3", func() []byte { b := good(); b[batchfmt.OffMagic] = 3; return b }(), 1 << 20, ErrCorrupt},
		{"too large", good(), 70, ErrTooLarge},
		{"codec 5", setAttrs(5), 1 << 20, ErrUnsupportedCompression},
		{"codec 7", setAttrs(7), 1 << 20, ErrUnsupportedCompression},
		{"transactional", setAttrs(1 | attrTransactional), 1 << 20, ErrTransactional},
		{"control", setAttrs(attrControl), 1 << 20, ErrTransactional},
		{"zero records", func() []byte {
			b := set32(batchfmt.OffRecordCount, 0, false)
			return recrc(set32At(b, batchfmt.OffLastOffsetDelta, 0xFFFFFFFF))
		}(), 1 << 20, ErrInvalidRecord},
		{"count vs delta", set32(batchfmt.OffLastOffsetDelta, 7, true), 1 << 20, ErrInvalidRecord},
		{"negative count", set32(batchfmt.OffRecordCount, 0x80000000, true), 1 << 20, ErrInvalidRecord},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateV2(tc.b, tc.max)
			require.ErrorIs(t, err, tc.want)
		})
	}
	// Uncompressed: more records than bytes can hold.
	b := buildV2(t, CodecNone, mkTestRecords(2, 1), 0)
	binary.BigEndian.PutUint32(b[batchfmt.OffRecordCount:], 1000)
	binary.BigEndian.PutUint32(b[batchfmt.OffLastOffsetDelta:], 999)
	_, err := ValidateV2(recrc(b), 1<<20)
	require.ErrorIs(t, err, ErrCorrupt)
}

func set32At(b []byte, off int, v uint32) []byte {
	binary.BigEndian.PutUint32(b[off:], v)
	return b
}

func TestCheckRecordsCatchesWhatValidateSkips(t *testing.T) {
	// Header claims 5 records, section holds 3: the header-only check passes.
	b := buildV2(t, CodecSnappy, mkTestRecords(3, 1), 0)
	binary.BigEndian.PutUint32(b[batchfmt.OffRecordCount:], 5)
	binary.BigEndian.PutUint32(b[batchfmt.OffLastOffsetDelta:], 4)
	recrc(b)
	_, err := ValidateV2(b, 1<<20)
	require.NoError(t, err)
	require.ErrorIs(t, CheckRecords(b, 1<<20), ErrInvalidRecord)
	// Undecodable compressed section.
	g := buildV2(t, CodecGzip, mkTestRecords(3, 1), 0)
	g[HeaderSize+3] ^= 0xff
	require.ErrorIs(t, CheckRecords(recrc(g), 1<<20), ErrCorrupt)
	require.ErrorIs(t, CheckRecords(g[:len(g)-1], 1<<20), ErrCorrupt)
	require.ErrorIs(t, CheckRecords(buildV2(t, CodecNone, mkTestRecords(300, 1), 0), 100), ErrTooLarge)
}

func TestErrorCode(t *testing.T) {
	require.EqualValues(t, 0, ErrorCode(nil, 3))
	_, err := ValidateV2([]byte{1, 2, 3}, 10)
	require.EqualValues(t, 2, ErrorCode(err, 9))
	require.EqualValues(t, 10, ErrorCode(ErrTooLarge, 3))
	require.EqualValues(t, 76, ErrorCode(ErrUnsupportedCompression, 3))
	require.EqualValues(t, 87, ErrorCode(ErrTransactional, 8))
	require.EqualValues(t, 2, ErrorCode(ErrInvalidRecord, 7))
}

func BenchmarkValidateV2(b *testing.B) {
	// ~1 MiB produce: 16 batches of 64 KiB-ish, half compressed.
	var req []byte
	for i := 0; len(req) < 1<<20; i++ {
		recs := mkTestRecords(600, int64(i))
		codec := CodecNone
		if i%2 == 1 {
			codec = CodecLZ4
		}
		req = append(req, buildV2(b, codec, recs, 0)...)
	}
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ValidateV2(req, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
