package kafka

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// frameOf is a request frame of n body bytes, length first.
func frameOf(n int) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(n))
	return append(f, bytes.Repeat([]byte{7}, n)...)
}

// A 1 MiB frame (a default producer's batch) costs little more than its
// bytes: doubling from 4 KiB allocated 2 MiB and copied 1 MiB of it.
func TestFrameReadAllocatesAboutItsLength(t *testing.T) {
	const n = 1 << 20
	wire := frameOf(n)
	allocs := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := ReadFrame(bytes.NewReader(wire), 64<<20)
			if err != nil || len(f) != n {
				b.Fatal(err, len(f))
			}
		}
	}).AllocedBytesPerOp()
	t.Logf("a %d-byte frame allocated %d bytes", n, allocs)
	require.Less(t, allocs, int64(n)*3/2)
}

// A frame's buffer never holds more than frameGrowth times what arrived
// (and frameChunk at first): a client announcing a large frame and
// sending a little of it costs what it sent.
func TestFrameBufferBoundedByBytesSent(t *testing.T) {
	for _, sent := range []int{0, 100, frameChunk, frameChunk + 1, 50 << 10, 1 << 20} {
		wire := binary.BigEndian.AppendUint32(nil, 64<<20)
		wire = append(wire, bytes.Repeat([]byte{7}, sent)...)
		r := &capWatcher{r: bytes.NewReader(wire)}
		_, err := ReadFrame(r, 128<<20)
		require.Error(t, err) // it ends early
		require.LessOrEqual(t, r.maxBuf, max(frameGrowth*sent, frameChunk), "sent %d", sent)
	}
}

// capWatcher records the largest buffer a reader was asked to fill.
type capWatcher struct {
	r      *bytes.Reader
	maxBuf int
}

func (w *capWatcher) Read(p []byte) (int, error) {
	w.maxBuf = max(w.maxBuf, cap(p))
	return w.r.Read(p)
}

// BenchmarkReadFrame reads the request frame of a default franz-go
// producer's full batch (about 1 MB): its allocations and copies as the
// buffer grows.
func BenchmarkReadFrame(b *testing.B) {
	const n = 1_000_100
	wire := frameOf(n)
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadFrame(bytes.NewReader(wire), 64<<20); err != nil {
			b.Fatal(err)
		}
	}
}
