// Package diskprobe measures a disk's limit for what a log does: sequential
// writes, each made durable with fdatasync. Every VDL benchmark prints its
// figures beside this one, measured in the same run on the same disk.
package diskprobe

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vdl-project/vdl/vfs"
)

// fileSize is the preallocated size of each probe file.
const fileSize = 256 << 20

// Measure runs writers goroutines for about d (and at least 16 writes
// each). Each writes chunk-byte blocks of random data with WriteAt +
// fdatasync into fresh preallocated files in dir, as the storage engine
// writes its segments: never overwriting (a log never does, and overwriting
// recently written blocks is cheaper than writing fresh space), and
// dropping synced data from the page cache, which the engine keeps to its
// active segments by default (a growing page cache costs host page faults
// on a virtual machine). The files are removed. The result is the
// aggregate in MiB/s.
func Measure(dir string, chunk, writers int, d time.Duration) (float64, error) {
	total := make([]int64, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			total[w], errs[w] = write(filepath.Join(dir, fmt.Sprintf("diskprobe-%d", w)), chunk, start, d)
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var n int64
	for w := range writers {
		if errs[w] != nil {
			return 0, errs[w]
		}
		n += total[w]
	}
	return float64(n) / (1 << 20) / secs, nil
}

func write(path string, chunk int, start time.Time, d time.Duration) (int64, error) {
	buf := make([]byte, chunk)
	_, _ = rand.Read(buf)
	var f vfs.File
	defer func() {
		if f != nil {
			f.Close()
		}
		os.Remove(path)
	}()
	var n, off int64
	for i := 0; time.Since(start) < d || i < 16; i++ {
		if f == nil || off+int64(chunk) > fileSize {
			if f != nil {
				f.Close()
				os.Remove(path)
			}
			var err error
			if f, err = (vfs.OS{}).Create(path); err != nil {
				return n, err
			}
			if err := f.Allocate(max(fileSize, int64(chunk))); err != nil {
				return n, err
			}
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return n, err
		}
		if err := f.Sync(); err != nil {
			return n, err
		}
		_ = f.DropCache(off, int64(chunk))
		off += int64(chunk)
		n += int64(chunk)
	}
	return n, nil
}
