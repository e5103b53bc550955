package storage

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/vdl-project/vdl/vfs"
)

// BenchmarkReadColdCatchUp: the storage side of a catch-up consumer, 1 MiB
// Reads (pooled, released) of 256 MiB of closed segments from offset 0,
// starting cold, beside a cold sequential read (1 MiB reads) of the same
// segment files in the same run: the disk's limit. Needs root to drop the
// page cache (otherwise both figures are warm and the ratio says little).
// Each side pauses 2 ms per MiB read when VDL_BENCH_CLIENT_MS is set, as a
// consumer's round trip would: readahead must then keep the disk busy
// while the reader is away.
func BenchmarkReadColdCatchUp(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "s")
	l, err := Open(Options{FS: vfs.OS{}, Dir: dir, Stream: 1, SegmentSize: 32 * mib, TailCacheBytes: mib, ReadAhead: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	fillLog(b, l, 16<<10, 256*mib)
	pause := time.Duration(0)
	if os.Getenv("VDL_BENCH_CLIENT_MS") != "" {
		pause = 2 * time.Millisecond
	}
	end := l.EndOffset()
	b.ResetTimer()
	var engine, cold float64
	for range b.N {
		dropCaches(b)
		start, bytes := time.Now(), 0
		for off := int64(0); off < end; {
			bs, rb, err := l.ReadPooled(off, end, mib)
			if err != nil {
				b.Fatal(err)
			}
			for _, x := range bs {
				bytes += len(x.Data)
			}
			off = bs[len(bs)-1].NextOffset
			rb.Release()
			time.Sleep(pause)
		}
		engine = float64(bytes) / mib / time.Since(start).Seconds()
		cold = coldRead(b, dir, pause)
	}
	b.ReportMetric(engine, "catchup-MB/s")
	b.ReportMetric(cold, "coldread-MB/s")
	b.ReportMetric(100*engine/cold, "%-of-cold")
}

func dropCaches(b *testing.B) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		b.Logf("page cache not dropped (not root?): %v", err)
	}
}

// coldRead reads dir's .seg files in order, 1 MiB at a time, from a dropped
// page cache.
func coldRead(b *testing.B, dir string, pause time.Duration) float64 {
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		b.Fatal(err)
	}
	sort.Strings(names)
	dropCaches(b)
	buf := make([]byte, mib)
	var n int64
	start := time.Now()
	for _, p := range names {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		for {
			k, err := f.Read(buf)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(pause)
		}
		_ = f.Close()
	}
	return float64(n) / mib / time.Since(start).Seconds()
}
