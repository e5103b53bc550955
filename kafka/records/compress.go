package records

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression codecs, as stored in the low three attribute bits of both v2
// batches and legacy messages.
const (
	CodecNone   int8 = 0
	CodecGzip   int8 = 1
	CodecSnappy int8 = 2
	CodecLZ4    int8 = 3
	CodecZstd   int8 = 4
)

// maxZstdWindow bounds the history a hostile zstd frame can make us
// allocate. Producers pledge the batch size, so real windows are at most the
// (≤ max batch) input; 32 MiB covers every level on batches up to that size.
const maxZstdWindow = 32 << 20

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzip.Reader) }}
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
		return w
	}}
	lz4Readers = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	lz4Writers = sync.Pool{New: func() any {
		// 64 KiB blocks like Kafka's own KafkaLZ4BlockOutputStream, so old
		// Java consumers allocate small block buffers.
		w := lz4.NewWriter(nil)
		_ = w.Apply(lz4.BlockSizeOption(lz4.Block64Kb))
		return w
	}}
	zstdReaders = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1), // synchronous: no goroutines per decoder
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			panic(err) // options are constant
		}
		z := &zstdReader{d}
		runtime.SetFinalizer(z, func(z *zstdReader) { z.d.Close() })
		return z
	}}
	// EncodeAll is goroutine-safe, so one encoder serves everyone.
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			panic(err)
		}
		return e
	})
)

type zstdReader struct{ d *zstd.Decoder }

// Decompress returns src decompressed with codec. More than limit output bytes
// fail with ErrTooLarge without producing them (decompression bombs stop at
// limit); malformed input fails with ErrCorrupt; an unknown codec with
// ErrUnsupportedCompression. snappy accepts both Java's xerial framing and a
// raw block; lz4 accepts Kafka ≤ 0.9's wrong frame-header checksum.
func Decompress(codec int8, src []byte, limit int) ([]byte, error) {
	if limit < 0 {
		limit = 0
	}
	switch codec {
	case CodecNone:
		if len(src) > limit {
			return nil, ErrTooLarge
		}
		return src, nil
	case CodecGzip:
		r := gzipReaders.Get().(*gzip.Reader)
		defer gzipReaders.Put(r)
		if err := r.Reset(bytes.NewReader(src)); err != nil {
			return nil, corrupt("gzip", err)
		}
		return readLimited(r, "gzip", len(src), limit)
	case CodecSnappy:
		return decodeSnappy(src, limit)
	case CodecLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(r)
		r.Reset(fixLZ4HeaderChecksum(src))
		return readLimited(r, "lz4", len(src), limit)
	case CodecZstd:
		z := zstdReaders.Get().(*zstdReader)
		defer zstdReaders.Put(z)
		if err := z.d.Reset(bytes.NewReader(src)); err != nil {
			return nil, corrupt("zstd", err)
		}
		out, err := readLimited(z.d, "zstd", len(src), limit)
		_ = z.d.Reset(nil) // drop the reference to src
		return out, err
	}
	return nil, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
}

// readLimited streams r into a fresh slice, failing once more than limit
// bytes come out. Growth starts from a guess so small outputs stay small.
func readLimited(r io.Reader, name string, srcLen, limit int) ([]byte, error) {
	guess := min(max(4*srcLen, 512), limit+1)
	buf := bytes.NewBuffer(make([]byte, 0, guess))
	n, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, corrupt(name, err)
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("%w: %s output exceeds %d bytes", ErrTooLarge, name, limit)
	}
	return buf.Bytes(), nil
}

func corrupt(what string, err error) error {
	if errors.Is(err, ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
}

// xerialMagic starts Java's snappy-java stream framing: magic, then
// int32 version and int32 min-compatible version, then [int32 len][block]….
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func decodeSnappy(src []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, corrupt("snappy", err)
		}
		if n > limit {
			return nil, fmt.Errorf("%w: snappy output %d exceeds %d bytes", ErrTooLarge, n, limit)
		}
		out, err := snappy.Decode(nil, src)
		if err != nil {
			return nil, corrupt("snappy", err)
		}
		return out, nil
	}
	if len(src) < 16 {
		return nil, fmt.Errorf("%w: short xerial header", ErrCorrupt)
	}
	// Versions are not checked: every snappy-java release wrote the same
	// block framing after them.
	rest := src[16:]
	// First pass: sum the declared block sizes so a bomb fails before any
	// allocation and the output is allocated once.
	total := 0
	for p := rest; len(p) > 0; {
		blk, next, err := xerialBlock(p)
		if err != nil {
			return nil, err
		}
		n, err := snappy.DecodedLen(blk)
		if err != nil {
			return nil, corrupt("snappy", err)
		}
		if total += n; total > limit {
			return nil, fmt.Errorf("%w: snappy output exceeds %d bytes", ErrTooLarge, limit)
		}
		p = next
	}
	out := make([]byte, 0, total)
	for p := rest; len(p) > 0; {
		blk, next, _ := xerialBlock(p)
		n, _ := snappy.DecodedLen(blk)
		if _, err := snappy.Decode(out[len(out):len(out)+n], blk); err != nil {
			return nil, corrupt("snappy", err)
		}
		out = out[:len(out)+n]
		p = next
	}
	return out, nil
}

func xerialBlock(p []byte) (blk, rest []byte, err error) {
	if len(p) < 4 {
		return nil, nil, fmt.Errorf("%w: truncated xerial block length", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return nil, nil, fmt.Errorf("%w: xerial block of %d bytes overruns input", ErrCorrupt, n)
	}
	return p[4 : 4+n], p[4+n:], nil
}

// fixLZ4HeaderChecksum returns a reader over src in which a frame-descriptor
// checksum computed the Kafka ≤ 0.9 way (xxh32 over magic+descriptor instead
// of the descriptor alone, KAFKA-3160) is replaced by the correct one, so
// pierrec/lz4 accepts it. Anything else is passed through untouched.
func fixLZ4HeaderChecksum(src []byte) io.Reader {
	const magic = 0x184D2204
	if len(src) < 7 || binary.LittleEndian.Uint32(src) != magic {
		return bytes.NewReader(src)
	}
	hc := 6 // magic(4) FLG(1) BD(1)
	flg := src[4]
	if flg&0x08 != 0 { // content size
		hc += 8
	}
	if flg&0x01 != 0 { // dictionary id
		hc += 4
	}
	if len(src) <= hc {
		return bytes.NewReader(src)
	}
	good := byte(xxh32(src[4:hc]) >> 8)
	if src[hc] == good || src[hc] != byte(xxh32(src[:hc])>>8) {
		return bytes.NewReader(src)
	}
	var hdr [19]byte
	n := copy(hdr[:], src[:hc])
	hdr[n] = good
	return io.MultiReader(bytes.NewReader(hdr[:n+1]), bytes.NewReader(src[hc+1:]))
}

// xxh32 with seed 0, enough for the ≤ 18-byte lz4 frame descriptor (and
// correct for any length).
func xxh32(b []byte) uint32 {
	const (
		p1 uint32 = 2654435761
		p2 uint32 = 2246822519
		p3 uint32 = 3266489917
		p4 uint32 = 668265263
		p5 uint32 = 374761393
	)
	n := uint32(len(b))
	var h uint32
	if len(b) >= 16 {
		seed1, seed2 := p1, p2 // variables: the sums wrap, as xxh32 intends
		v1, v2, v3, v4 := seed1+seed2, seed2, uint32(0), 0-seed1
		round := func(v, x uint32) uint32 { return bits.RotateLeft32(v+x*p2, 13) * p1 }
		for ; len(b) >= 16; b = b[16:] {
			v1 = round(v1, binary.LittleEndian.Uint32(b))
			v2 = round(v2, binary.LittleEndian.Uint32(b[4:]))
			v3 = round(v3, binary.LittleEndian.Uint32(b[8:]))
			v4 = round(v4, binary.LittleEndian.Uint32(b[12:]))
		}
		h = bits.RotateLeft32(v1, 1) + bits.RotateLeft32(v2, 7) + bits.RotateLeft32(v3, 12) + bits.RotateLeft32(v4, 18)
	} else {
		h = p5
	}
	h += n
	for ; len(b) >= 4; b = b[4:] {
		h = bits.RotateLeft32(h+binary.LittleEndian.Uint32(b)*p3, 17) * p4
	}
	for ; len(b) > 0; b = b[1:] {
		h = bits.RotateLeft32(h+uint32(b[0])*p5, 11) * p1
	}
	h ^= h >> 15
	h *= p2
	h ^= h >> 13
	h *= p3
	h ^= h >> 16
	return h
}

// resettableWriter is a pooled streaming compressor (gzip, lz4).
type resettableWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// compressWith runs src through a pooled streaming compressor.
func compressWith(w resettableWriter, src []byte) ([]byte, error) {
	var buf bytes.Buffer
	w.Reset(&buf)
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Compress returns src compressed with codec in the framing Kafka clients
// expect: gzip, snappy in xerial framing with 32 KiB blocks (what the Java
// producer writes; every client reads it), an lz4 frame with a correct
// header checksum, or a zstd frame.
func Compress(codec int8, src []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return src, nil
	case CodecGzip:
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		return compressWith(w, src)
	case CodecSnappy:
		return xerial.Encode(nil, src), nil
	case CodecLZ4:
		w := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(w)
		return compressWith(w, src)
	case CodecZstd:
		return zstdEncoder().EncodeAll(src, nil), nil
	}
	return nil, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
}
