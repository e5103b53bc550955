package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/vfs"
)

func pooledLog(t testing.TB) *Log {
	l, err := Open(Options{FS: vfs.NewMem(), Dir: "/s", Stream: 1, SegmentSize: mib, TailCacheBytes: 64 << 10, ReadAhead: true})
	require.NoError(t, err)
	return l
}

// TestReadPooledReusesBuffers: catch-up reads into pooled memory give the
// same batches as Read, and a released buffer serves the next read
// without a new one.
func TestReadPooledReusesBuffers(t *testing.T) {
	l := pooledLog(t)
	defer l.Close()
	fillLog(&testing.B{}, l, 16<<10, 4*mib)
	end := l.EndOffset()
	want, err := l.Read(0, end, 256<<10)
	require.NoError(t, err)
	got, rb, err := l.ReadPooled(0, end, 256<<10)
	require.NoError(t, err)
	require.NotNil(t, rb.buf, "from the segment files")
	require.Equal(t, want, got)
	first := &rb.buf[0]
	rb.Release()
	// sync.Pool may drop an item (a GC between Put and Get): try a few.
	reused := false
	for range 5 {
		got, rb, err = l.ReadPooled(0, end, 256<<10)
		require.NoError(t, err)
		require.Equal(t, want, got)
		reused = reused || &rb.buf[0] == first
		first = &rb.buf[0]
		rb.Release()
	}
	require.True(t, reused, "a released buffer is read into again")
}

// BenchmarkReadPooled: 1 MiB catch-up reads of closed segments (in-memory
// FS: the engine's own cost) with Read (a fresh buffer per read, zeroed by
// the allocator) and ReadPooled (released after each read, as the Kafka
// front end does once the response is written). Regression metric:
// alloc-B/read, the bytes allocated per read.
func BenchmarkReadPooled(b *testing.B) {
	for _, pooled := range []bool{false, true} {
		name := "fresh"
		if pooled {
			name = "pooled"
		}
		b.Run(name, func(b *testing.B) {
			l := pooledLog(b)
			defer l.Close()
			fillLog(b, l, 16<<10, 32*mib)
			end := l.EndOffset()
			off, bytes := int64(0), 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var bs []Batch
				var rb *ReadBuf
				var err error
				if pooled {
					bs, rb, err = l.ReadPooled(off, end, mib)
				} else {
					bs, err = l.Read(off, end, mib)
				}
				if err != nil {
					b.Fatal(err)
				}
				for _, x := range bs {
					bytes += len(x.Data)
				}
				off = bs[len(bs)-1].NextOffset
				rb.Release()
				if off == end {
					off = 0
				}
			}
			b.ReportMetric(float64(bytes)/mib/b.Elapsed().Seconds(), "MB/s")
		})
	}
}

func TestSizeClass(t *testing.T) {
	prev := 0
	for _, n := range []int{1, 64 << 10, 64<<10 + 1, 80 << 10, 96<<10 + 1, 128 << 10, mib, mib + 100, 5 * mib, 64 * mib} {
		size, class := sizeClass(n)
		require.GreaterOrEqual(t, size, n)
		require.LessOrEqual(t, size, max(64<<10, n+n/4+1), "n=%d", n)
		require.GreaterOrEqual(t, class, prev)
		require.Less(t, class, len(dataPools))
		prev = class
		s2, c2 := sizeClass(size)
		require.Equal(t, size, s2)
		require.Equal(t, class, c2, "a class's size is in the class")
	}
	size, _ := sizeClass(mib + 100)
	require.Equal(t, mib+mib/4, size)
}

// TestReadAheadServesNextChunk: sequential pooled catch-up reads take the
// chunk read ahead for them, and get exactly what Read returns; a reader
// that asks for something else (another size, another offset) is not
// served a read ahead.
func TestReadAheadServesNextChunk(t *testing.T) {
	l := pooledLog(t)
	defer l.Close()
	fillLog(&testing.B{}, l, 16<<10, 4*mib)
	end := l.EndOffset()
	served := 0
	for _, size := range []int{256 << 10, 100 << 10, 256 << 10} {
		for off := int64(0); off < end; {
			ahead := l.ahead.take(off, end, size)
			if ahead != nil {
				served++
				l.readAheadFrom(off, end, size) // put it back: ReadPooled takes it
				ahead.drop()
			}
			want, err := l.Read(off, end, size)
			require.NoError(t, err)
			got, rb, err := l.ReadPooled(off, end, size)
			require.NoError(t, err)
			require.Equal(t, want, got, "offset %d", off)
			off = got[len(got)-1].NextOffset
			rb.Release()
		}
	}
	require.Positive(t, served, "reads ahead were there for the next chunk")
	require.Eventually(t, func() bool { return aheadHeld.Load() <= int64(aheadSlots*(256<<10)) }, time.Second, time.Millisecond)
}

// TestNoReadAheadByDefault: without Options.ReadAhead (the simulator) no
// read is started in the background.
func TestNoReadAheadByDefault(t *testing.T) {
	l, err := Open(Options{FS: vfs.NewMem(), Dir: "/s", Stream: 1, SegmentSize: mib, TailCacheBytes: 64 << 10})
	require.NoError(t, err)
	defer l.Close()
	fillLog(&testing.B{}, l, 16<<10, 2*mib)
	_, rb, err := l.ReadPooled(0, l.EndOffset(), 256<<10)
	require.NoError(t, err)
	require.NotNil(t, rb.buf, "a disk read")
	rb.Release()
	for _, r := range l.ahead.slots {
		require.Nil(t, r)
	}
}

// TestUntakenReadAheadIsDropped: a read ahead whose consumer went away
// leaves its slot (and gives its budget back) after aheadTTL.
func TestUntakenReadAheadIsDropped(t *testing.T) {
	l := pooledLog(t)
	defer l.Close()
	fillLog(&testing.B{}, l, 16<<10, 2*mib)
	_, rb, err := l.ReadPooled(0, l.EndOffset(), 256<<10)
	require.NoError(t, err)
	rb.Release()
	taken := func() bool {
		l.ahead.mu.Lock()
		defer l.ahead.mu.Unlock()
		for _, r := range l.ahead.slots {
			if r != nil {
				return false
			}
		}
		return true
	}
	require.False(t, taken(), "the next chunk is being read ahead")
	require.Eventually(t, taken, 3*aheadTTL, 10*time.Millisecond)
}
