package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vdl-project/vdl/raftnode"
)

// rawDisk holds the file system's sequential durable write rates,
// measured once per process: writers goroutines each WriteAt 256 KiB and
// fdatasync, repeatedly, for about a second (at most 256 MiB each), in
// fresh files; the result is the aggregate MB/s.
var rawDisk struct {
	once       sync.Once
	one, three float64
	err        error
}

func measureRawDisk(dir string, writers int) (float64, error) {
	var total atomic.Int64
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("rawdisk-%d", w)))
			if err != nil {
				errs[w] = err
				return
			}
			defer os.Remove(f.Name())
			defer f.Close()
			chunk := make([]byte, 256<<10)
			for i := range chunk {
				chunk[i] = byte(i * 7)
			}
			for off := int64(0); time.Since(start) < time.Second && off < 256<<20; off += int64(len(chunk)) {
				if _, err := f.WriteAt(chunk, off); err != nil {
					errs[w] = err
					return
				}
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					errs[w] = err
					return
				}
				total.Add(int64(len(chunk)))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(total.Load()) / 1e6 / time.Since(start).Seconds(), nil
}

// rawDiskMBps returns the single-writer and the 3-writer aggregate rates.
func rawDiskMBps(dir string) (one, three float64, err error) {
	rawDisk.once.Do(func() {
		if rawDisk.one, rawDisk.err = measureRawDisk(dir, 1); rawDisk.err == nil {
			rawDisk.three, rawDisk.err = measureRawDisk(dir, 3)
		}
	})
	return rawDisk.one, rawDisk.three, rawDisk.err
}

// BenchmarkReplication measures committed throughput and commit latency of
// one group on 3 replicas sharing this machine's disk, with 64 concurrent
// proposers (each waits for its proposal's commit, so 64 are in flight and
// the host pipelines and group-commits them). Each op is one entry holding
// one Kafka batch with one record of the given size.
func BenchmarkReplication(b *testing.B) {
	for _, mode := range []string{"async", "sync"} {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/entry=%dKiB", mode, size>>10), func(b *testing.B) {
				benchReplication(b, size, mode == "sync")
			})
		}
	}
}

func benchReplication(b *testing.B, size int, syncWrites bool) {
	// Enough proposals in flight to saturate: about 1 MiB (64 at 16 KiB,
	// 1024 at 1 KiB), as many concurrent producers would.
	proposers := max(64, (1<<20)/size)
	c := New(b, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}, SegmentSize: 64 << 20,
		Core: raftnode.Config{SyncWrites: syncWrites}})
	raw, raw3, err := rawDiskMBps(c.dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	batch := Batch(Value("bench|", size))
	for i := 0; i < 200; i++ { // warm up: leader elected, connections up
		if _, err := c.Propose(ctx, 1, batch); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < proposers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if _, err := c.Propose(ctx, 1, batch); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	mbps := float64(b.N) * float64(len(batch)) / 1e6 / el.Seconds()
	limit := raw / 3
	b.ReportMetric(mbps, "committed-MB/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(raw, "raw-disk-MB/s")
	b.ReportMetric(mbps/limit, "ratio-to-raw/3")
	b.ReportMetric(raw3, "raw-disk-3writers-MB/s")
	if b.N >= 1000 {
		b.Logf("entry %d B, %d entries in %v: %.1f MB/s committed; raw disk %.1f MB/s (3 writers: %.1f), limit for 3 replicas %.1f MB/s (3 writers: %.1f), ratio %.2f (%.2f); p50 %v p99 %v",
			len(batch), b.N, el.Round(time.Millisecond), mbps, raw, raw3, limit, raw3/3, mbps/limit, mbps/(raw3/3), lat[len(lat)/2], lat[len(lat)*99/100])
	}
}
