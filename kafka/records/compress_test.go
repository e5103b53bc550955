package records

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/stretchr/testify/require"
)

func sample(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/13)
	}
	return b
}

func TestCompressRoundTrip(t *testing.T) {
	for _, c := range allCodecs {
		for _, n := range []int{0, 1, 100, 70 << 10, 1 << 20} {
			src := sample(n)
			z, err := Compress(c, src)
			require.NoError(t, err)
			got, err := Decompress(c, z, n)
			require.NoError(t, err, "codec %d n %d", c, n)
			require.Equal(t, len(src), len(got))
			require.True(t, bytes.Equal(src, got))
			if n > 0 {
				_, err = Decompress(c, z, n-1)
				require.ErrorIs(t, err, ErrTooLarge, "codec %d n %d", c, n)
			}
		}
	}
	_, err := Compress(5, nil)
	require.ErrorIs(t, err, ErrUnsupportedCompression)
	_, err = Decompress(6, nil, 10)
	require.ErrorIs(t, err, ErrUnsupportedCompression)
}

func TestSnappyXerialAndRaw(t *testing.T) {
	src := sample(100 << 10)
	x, err := Compress(CodecSnappy, src)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(x, xerialMagic), "Compress writes xerial framing")
	raw := snappy.Encode(nil, src)
	for _, in := range [][]byte{x, raw} {
		got, err := Decompress(CodecSnappy, in, len(src))
		require.NoError(t, err)
		require.Equal(t, src, got)
	}
	// Header only (an empty xerial stream) is empty output.
	got, err := Decompress(CodecSnappy, x[:16], 10)
	require.NoError(t, err)
	require.Empty(t, got)
	// Broken framing.
	for _, bad := range [][]byte{x[:10], x[:18], x[:len(x)-1], append(append([]byte{}, x[:16]...), 0xff, 0xff, 0xff, 0xff, 1)} {
		_, err := Decompress(CodecSnappy, bad, 1<<20)
		require.ErrorIs(t, err, ErrCorrupt)
	}
	// Bombs: raw block claiming 1 GiB, xerial blocks summing over the limit.
	bomb := binary.AppendUvarint(nil, 1<<30)
	_, err = Decompress(CodecSnappy, bomb, 1<<20)
	require.ErrorIs(t, err, ErrTooLarge)
	xb := append([]byte{}, x[:16]...)
	blk := snappy.Encode(nil, make([]byte, 64<<10))
	for range 100 {
		xb = binary.BigEndian.AppendUint32(xb, uint32(len(blk)))
		xb = append(xb, blk...)
	}
	_, err = Decompress(CodecSnappy, xb, 1<<20)
	require.ErrorIs(t, err, ErrTooLarge)
}

// Kafka ≤ 0.9 computed the lz4 frame-descriptor checksum over the magic too.
func TestLZ4BrokenKafka09HeaderChecksum(t *testing.T) {
	src := sample(10000)
	z, err := Compress(CodecLZ4, src)
	require.NoError(t, err)
	hc := 6
	if z[4]&0x08 != 0 {
		hc += 8
	}
	require.Equal(t, z[hc], byte(xxh32(z[4:hc])>>8), "xxh32 agrees with pierrec/lz4")
	broken := append([]byte{}, z...)
	broken[hc] = byte(xxh32(broken[:hc]) >> 8)
	require.NotEqual(t, z[hc], broken[hc])
	got, err := Decompress(CodecLZ4, broken, len(src))
	require.NoError(t, err)
	require.Equal(t, src, got)
	// Any other wrong checksum is still refused.
	broken[hc] ^= 0x55
	_, err = Decompress(CodecLZ4, broken, len(src))
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestXXH32Vectors(t *testing.T) {
	require.Equal(t, uint32(0x02cc5d05), xxh32(nil))
	require.Equal(t, uint32(0x550d7456), xxh32([]byte("a")))
	require.Equal(t, uint32(0x32d153ff), xxh32([]byte("abc")))
	// ≥16 bytes takes the striped path.
	require.Equal(t, uint32(0x63a14d5f), xxh32([]byte("abcdefghijklmnopqrstuvwxyz")))
}

// zeroReader streams zeros so bombs are built without holding their output.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestDecompressionBombs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 1 GiB bombs")
	}
	const limit = 1 << 20
	const bombSize = 1 << 30
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, err := io.CopyN(w, zeroReader{}, bombSize)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var lz bytes.Buffer
	lw := lz4.NewWriter(&lz)
	_, err = io.CopyN(lw, zeroReader{}, bombSize/8)
	require.NoError(t, err)
	require.NoError(t, lw.Close())
	var zs bytes.Buffer
	zw, _ := zstd.NewWriter(&zs, zstd.WithEncoderLevel(zstd.SpeedFastest))
	_, err = io.CopyN(zw, zeroReader{}, bombSize)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	zsAll, _ := zstd.NewWriter(nil)
	zsDeclared := zsAll.EncodeAll(make([]byte, 64<<20), nil) // declares its content size
	t.Logf("bombs: gzip %d, lz4 %d, zstd %d, zstd-declared %d bytes", gz.Len(), lz.Len(), zs.Len(), len(zsDeclared))

	for name, tc := range map[string]struct {
		codec int8
		b     []byte
	}{"gzip": {CodecGzip, gz.Bytes()}, "lz4": {CodecLZ4, lz.Bytes()}, "zstd": {CodecZstd, zs.Bytes()}, "zstd-declared": {CodecZstd, zsDeclared}} {
		start := time.Now()
		_, err := Decompress(tc.codec, tc.b, limit)
		require.ErrorIs(t, err, ErrTooLarge, name)
		require.Less(t, time.Since(start), 2*time.Second, name)
	}
}

func TestDecompressGarbage(t *testing.T) {
	for _, c := range []int8{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		for _, b := range [][]byte{nil, {0}, []byte("definitely not compressed data at all")} {
			_, err := Decompress(c, b, 1<<20)
			if err != nil {
				require.ErrorIs(t, err, ErrCorrupt, "codec %d", c)
			}
		}
	}
}
