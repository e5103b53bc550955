package records

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// stored builds what storage holds: validated batches with real offsets.
func stored(t *testing.T, first int64, batches ...[]byte) []byte {
	var b []byte
	for _, x := range batches {
		b = append(b, x...)
	}
	_, err := ValidateV2(b, 1<<20)
	require.NoError(t, err)
	StampBaseOffsets(b, first)
	return b
}

func TestToMessageSetCodecsAndOffsets(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		for _, codec := range allCodecs {
			recs := mkTestRecords(7, 1_700_000_000_000)
			b := stored(t, 1000, buildV2(t, CodecNone, mkTestRecords(2, 5), 0), buildV2(t, codec, recs, 0))
			ms, err := ToMessageSet(b, magic)
			require.NoError(t, err)
			msgs, wrappers := decodeMessageSet(t, ms)
			require.Len(t, msgs, 9)
			for i, m := range msgs {
				require.EqualValues(t, 1000+i, m.Offset, "absolute offsets, magic %d codec %d", magic, codec)
			}
			want := codec
			if codec == CodecZstd || (codec == CodecLZ4 && magic == 0) {
				want = CodecNone
			}
			if want == CodecNone {
				require.Empty(t, wrappers)
			} else {
				require.Equal(t, []int8{want}, wrappers)
			}
			for i, r := range recs {
				m := msgs[2+i]
				require.Equal(t, r.Key == nil, m.Key == nil)
				require.Equal(t, r.Value == nil, m.Value == nil)
				require.Equal(t, string(r.Key), string(m.Key))
				require.Equal(t, string(r.Value), string(m.Value))
				if magic == 1 {
					require.Equal(t, r.Ts, m.Ts)
				}
			}
			// And back: a legacy producer re-sending what it fetched.
			back, _, err := FromMessageSet(ms, 1<<20, 1<<20)
			require.NoError(t, err)
			got := decodeV2(t, back)
			require.Len(t, got, 9)
			require.Equal(t, string(recs[6].Value), string(got[8].Value))
		}
	}
}

func TestToMessageSetLogAppendTimeAndControl(t *testing.T) {
	lat := buildV2(t, CodecGzip, mkTestRecords(3, 10), attrLogAppendTime)
	ctl := buildV2(t, CodecNone, mkTestRecords(1, 10), attrControl)
	b := append(lat, ctl...)
	StampBaseOffsets(b, 0)
	ms, err := ToMessageSet(b, 1)
	require.NoError(t, err)
	msgs, _ := decodeMessageSet(t, ms)
	require.Len(t, msgs, 3, "control batch skipped")
	for _, m := range msgs {
		require.EqualValues(t, 12, m.Ts, "LogAppendTime uses MaxTimestamp")
	}
}

func TestToMessageSetUndecodableBatchBecomesPlaceholder(t *testing.T) {
	// Header-valid, CRC-valid, records garbage: ValidateV2 accepts it.
	bad := buildV2(t, CodecNone, mkTestRecords(3, 1), 0)
	for i := HeaderSize; i < len(bad); i++ {
		bad[i] = 0xff
	}
	recrc(bad)
	b := stored(t, 50, buildV2(t, CodecNone, mkTestRecords(2, 1), 0), bad, buildV2(t, CodecSnappy, mkTestRecords(2, 1), 0))
	for _, magic := range []int8{0, 1} {
		ms, err := ToMessageSet(b, magic)
		require.NoError(t, err)
		msgs, _ := decodeMessageSet(t, ms)
		var offs []int64
		for _, m := range msgs {
			offs = append(offs, m.Offset)
		}
		require.Equal(t, []int64{50, 51, 54, 55, 56}, offs)
		require.Nil(t, msgs[2].Value)
	}
}

func TestToMessageSetDropsPartialTailAndRejectsMagic(t *testing.T) {
	b := stored(t, 0, buildV2(t, CodecNone, mkTestRecords(2, 1), 0), buildV2(t, CodecNone, mkTestRecords(2, 1), 0))
	ms, err := ToMessageSet(b[:len(b)-5], 1)
	require.NoError(t, err)
	msgs, _ := decodeMessageSet(t, ms)
	require.Len(t, msgs, 2)
	_, err = ToMessageSet(b, 2)
	require.Error(t, err)
	ms, err = ToMessageSet(nil, 0)
	require.NoError(t, err)
	require.Empty(t, ms)
}

func TestBatchWalking(t *testing.T) {
	b := stored(t, 100,
		buildV2(t, CodecNone, mkTestRecords(3, 1), 0), // 100..102
		buildV2(t, CodecGzip, mkTestRecords(5, 1), 0), // 103..107
		buildV2(t, CodecZstd, mkTestRecords(1, 1), 0)) // 108
	var lasts []int64
	for h, batch := range Batches(b) {
		require.EqualValues(t, len(batch), h.Size())
		lasts = append(lasts, h.LastOffset())
	}
	require.Equal(t, []int64{102, 107, 108}, lasts)
	for _, tc := range []struct {
		off  int64
		want int64 // base offset of the batch found; -1 none
	}{{0, 100}, {100, 100}, {102, 100}, {103, 103}, {105, 103}, {108, 108}, {109, -1}} {
		pos, ok := FindOffset(b, tc.off)
		if tc.want < 0 {
			require.False(t, ok)
			require.Equal(t, len(b), pos)
			continue
		}
		require.True(t, ok)
		require.EqualValues(t, tc.want, int64(binary.BigEndian.Uint64(b[pos:])))
	}
	whole, rest := Split(b[:len(b)-1])
	_, ok := FindOffset(b[:len(b)-1], 108)
	require.False(t, ok, "partial batch is not found")
	require.Equal(t, b[:len(whole)], whole)
	require.Len(t, rest, len(b)-1-len(whole))
	n := 0
	for range Batches(whole) {
		n++
	}
	require.Equal(t, 2, n)
	for range Batches(b) {
		break // early stop is honoured
	}
	_, ok = ReadHeader(b[:60])
	require.False(t, ok)
}
