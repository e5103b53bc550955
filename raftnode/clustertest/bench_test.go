package clustertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vdl-project/vdl/internal/diskprobe"
	"github.com/vdl-project/vdl/raftnode"
)

// rawDiskMBps returns the file system's sequential durable write rate
// (internal/diskprobe: 256 KiB WriteAt + fdatasync, about a second) for one
// writer and the aggregate of three at once, as the three replicas write.
func rawDiskMBps(dir string) (one, three float64, err error) {
	if one, err = diskprobe.Measure(dir, 256<<10, 1, time.Second); err != nil {
		return 0, 0, err
	}
	three, err = diskprobe.Measure(dir, 256<<10, 3, time.Second)
	return one, three, err
}

// BenchmarkReplication measures committed throughput and commit latency of
// one group on 3 replicas sharing this machine's disk, with about 1 MiB of
// proposals in flight (64 proposers at 16 KiB, 1024 at 1 KiB; each waits
// for its proposal's commit, so the host pipelines and group-commits them,
// and merges small proposals stepped together into shared entries). Each
// op is one proposal: one Kafka batch with one record of the given size.
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
	// Proposers call the leader's host directly, as a server's Kafka
	// produce path does: what is measured is replication, not the test
	// harness's leader lookups.
	leader := c.Leader(1)
	if leader == nil {
		b.Fatal("no leader after warm-up")
	}
	host, data := leader.Host(), raftnode.UserData(batch)
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
				if _, err := host.Propose(ctx, 1, data); err != nil {
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
	mbps := float64(b.N) * float64(len(batch)) / (1 << 20) / el.Seconds()
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
