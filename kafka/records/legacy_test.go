package records

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"
)

type legacyIn struct {
	Key, Value []byte
	Ts         int64
}

func legacyInputs(n int) []legacyIn {
	out := make([]legacyIn, n)
	for i := range out {
		out[i] = legacyIn{Key: []byte{byte('a' + i%26)}, Value: bytes.Repeat([]byte{byte(i)}, 10+i), Ts: 1_600_000_000_000 + int64(i)}
	}
	out[0].Key = nil
	if n > 1 {
		out[1].Value = []byte{}
	}
	return out
}

// legacySet builds a MessageSet like an old producer: uncompressed, or one
// compressed wrapper (magic 1: inner relative offsets, wrapper = last
// absolute; magic 0: inner absolute offsets starting at first).
func legacySet(t testing.TB, magic, codec int8, msgs []legacyIn, first int64) []byte {
	t.Helper()
	var set []byte
	for i, m := range msgs {
		off := first + int64(i)
		if codec != 0 && magic == 1 {
			off = int64(i)
		}
		if magic == 0 {
			set = append(set, mkV0(off, 0, m.Key, m.Value)...)
		} else {
			set = append(set, mkV1(off, 0, m.Ts, m.Key, m.Value)...)
		}
	}
	if codec == 0 {
		return set
	}
	z, err := Compress(codec, set)
	require.NoError(t, err)
	last := first + int64(len(msgs)) - 1
	if magic == 0 {
		return mkV0(last, codec, nil, z)
	}
	return mkV1(last, codec, msgs[len(msgs)-1].Ts, nil, z)
}

func requireSameRecords(t *testing.T, magic int8, in []legacyIn, got []gotRecord, firstOffset int64) {
	t.Helper()
	require.Len(t, got, len(in))
	for i := range in {
		require.Equal(t, firstOffset+int64(i), got[i].Offset)
		require.Equal(t, in[i].Key == nil, got[i].Key == nil, "null key kept")
		require.Equal(t, in[i].Value == nil, got[i].Value == nil, "null value kept")
		require.True(t, bytes.Equal(in[i].Key, got[i].Key))
		require.True(t, bytes.Equal(in[i].Value, got[i].Value))
		if magic == 0 {
			require.EqualValues(t, -1, got[i].Ts)
		} else {
			require.Equal(t, in[i].Ts, got[i].Ts)
		}
	}
}

func TestFromMessageSetEveryCodecAndMagic(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		for _, codec := range []int8{CodecNone, CodecGzip, CodecSnappy, CodecLZ4} {
			in := legacyInputs(20)
			set := legacySet(t, magic, codec, in, 500) // v0 inner absolute offsets 500.. must be renumbered
			out, info, err := FromMessageSet(set, 1<<20, 1<<20)
			require.NoError(t, err, "magic %d codec %d", magic, codec)
			require.Equal(t, 1, info.Batches)
			require.EqualValues(t, 20, info.Records)
			require.True(t, info.Codecs.Has(codec))
			require.Equal(t, len(out), info.Bytes)
			vi, err := ValidateV2(out, 1<<20)
			require.NoError(t, err)
			require.Equal(t, info.Records, vi.Records)
			require.Equal(t, info.MaxTimestamp, vi.MaxTimestamp)
			h, _ := ReadHeader(out)
			require.Equal(t, codec, h.Codec(), "same codec")
			require.EqualValues(t, -1, h.ProducerID)
			require.NoError(t, CheckRecords(out, 1<<20))
			requireSameRecords(t, magic, in, decodeV2(t, out), 0)
		}
	}
}

func TestFromMessageSetMixedAndSplit(t *testing.T) {
	a, b, c := legacyInputs(3), legacyInputs(5), legacyInputs(4)
	set := legacySet(t, 1, 0, a, 0)
	set = append(set, legacySet(t, 1, CodecGzip, b, 99)...)
	set = append(set, legacySet(t, 0, 0, c, 7)...)
	out, info, err := FromMessageSet(set, 1<<20, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 3, info.Batches)
	got := decodeV2(t, out)
	require.Len(t, got, 12)
	for i, g := range got {
		require.EqualValues(t, i, g.Offset, "renumbered across batches")
	}
	require.Equal(t, StampBaseOffsets(out, 1000), int64(1012))
	require.EqualValues(t, 1011, decodeV2(t, out)[11].Offset)

	// Many small uncompressed messages are split into batches ≤ max.
	many := legacySet(t, 1, 0, legacyInputs(200), 0)
	out, info, err = FromMessageSet(many, 1000, 1<<20)
	require.NoError(t, err)
	require.Greater(t, info.Batches, 5)
	for h := range Batches(out) {
		require.LessOrEqual(t, h.Size(), int64(1000))
	}
	_, err = ValidateV2(out, 1000)
	require.NoError(t, err)
	require.Len(t, decodeV2(t, out), 200)
}

func TestFromMessageSetLogAppendTimeWrapper(t *testing.T) {
	in := legacyInputs(3)
	set := legacySet(t, 1, CodecGzip, in, 0)
	// Re-make the wrapper with the LogAppendTime bit and its own timestamp.
	inner, err := Decompress(CodecGzip, set[12+4+1+1+8+4+4:], 1<<20)
	require.NoError(t, err)
	z, _ := Compress(CodecGzip, inner)
	set = mkV1(2, CodecGzip|legacyAttrLogAppendTime, 42, nil, z)
	out, _, err := FromMessageSet(set, 1<<20, 1<<20)
	require.NoError(t, err)
	for _, g := range decodeV2(t, out) {
		require.EqualValues(t, 42, g.Ts)
	}
	h, _ := ReadHeader(out)
	require.False(t, h.LogAppendTime(), "output is CreateTime")
}

func TestFromMessageSetRejects(t *testing.T) {
	good := legacySet(t, 1, 0, legacyInputs(3), 0)
	flip := func(b []byte, i int) []byte { b = append([]byte{}, b...); b[i] ^= 1; return b }
	wrapperOf := func(magic, codec int8, inner []byte) []byte {
		z, err := Compress(codec, inner)
		require.NoError(t, err)
		if magic == 0 {
			return mkV0(0, codec, nil, z)
		}
		return mkV1(0, codec, 1, nil, z)
	}
	nested := wrapperOf(1, CodecGzip, wrapperOf(1, CodecGzip, good))
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrInvalidRecord},
		{"bad crc", flip(good, len(good)-1), ErrCorrupt},
		{"bad crc field", flip(good, 13), ErrCorrupt},
		{"partial trailing", good[:len(good)-2], ErrCorrupt},
		{"partial header", append(append([]byte{}, good...), 0, 0, 0), ErrCorrupt},
		{"negative size", func() []byte { b := append([]byte{}, good...); binary.BigEndian.PutUint32(b[8:], 0xFFFFFFF0); return b }(), ErrCorrupt},
		{"huge size", func() []byte { b := append([]byte{}, good...); binary.BigEndian.PutUint32(b[8:], 0x7FFFFFF0); return b }(), ErrCorrupt},
		{"magic 2", func() []byte {
			b := append([]byte{}, good...)
			b[16] = 2
			binary.BigEndian.PutUint32(b[12:], crc32IEEE(b[16:binary.BigEndian.Uint32(b[8:])+12]))
			return b
		}(), ErrCorrupt},
		{"inner bad crc", wrapperOf(1, CodecSnappy, flip(good, 30)), ErrCorrupt},
		{"inner partial", wrapperOf(0, CodecGzip, good[:len(good)-1]), ErrCorrupt},
		{"inner empty", wrapperOf(1, CodecGzip, nil), ErrInvalidRecord},
		{"nested compression", nested, ErrInvalidRecord},
		{"zstd wrapper", mkV1(0, CodecZstd, 1, nil, []byte{1}), ErrUnsupportedCompression},
		{"codec 6", mkV1(0, 6, 1, nil, []byte{1}), ErrUnsupportedCompression},
		{"null wrapper value", mkV1(0, CodecGzip, 1, nil, nil), ErrCorrupt},
		{"garbage wrapper value", mkV0(0, CodecLZ4, nil, []byte("nope")), ErrCorrupt},
		{"trailing field bytes", func() []byte {
			// size covers one extra byte after the value, CRC valid.
			b := mkV1(0, 0, 1, []byte("k"), []byte("v"))
			b = append(b, 0)
			binary.BigEndian.PutUint32(b[8:], binary.BigEndian.Uint32(b[8:])+1)
			binary.BigEndian.PutUint32(b[12:], crc32IEEE(b[16:]))
			return b
		}(), ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := FromMessageSet(tc.b, 1<<20, 1<<20)
			require.ErrorIs(t, err, tc.want)
		})
	}
	_, _, err := FromMessageSet(good, 20, 1<<20)
	require.ErrorIs(t, err, ErrTooLarge)
	big := legacySet(t, 1, CodecGzip, legacyInputs(100), 0)
	_, _, err = FromMessageSet(big, 1<<20, 500)
	require.ErrorIs(t, err, ErrTooLarge)
}

// A wrapper holding 1 GiB of zeros stops at the decompression limit.
func TestFromMessageSetZipBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 1 GiB bomb")
	}
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, err := io.CopyN(w, zeroReader{}, 1<<30)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	for _, magic := range []int8{0, 1} {
		var set []byte
		if magic == 0 {
			set = mkV0(0, CodecGzip, nil, gz.Bytes())
		} else {
			set = mkV1(0, CodecGzip, 0, nil, gz.Bytes())
		}
		_, _, err = FromMessageSet(set, 2<<20, 4<<20)
		require.ErrorIs(t, err, ErrTooLarge)
	}
}
