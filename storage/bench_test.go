package storage

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/diskprobe"
	"github.com/vdl-project/vdl/vfs"
)

// Benchmarks on the real file system (a temp dir):
//
//	go test -run '^$' -bench . ./storage/
//
// Raw is the device's limit measured in the same run (internal/diskprobe):
// sequential WriteAt + fdatasync into fresh preallocated files. The
// engine's Write+Sync throughput is reported beside its ratio to raw at the
// same group-commit size. The entries are built once and renumbered for
// each group: building them is the caller's (raft's) work, not the engine's.

const mib = 1 << 20

// rawMBps is the device's limit for size-byte groups, measured for about a
// second right before the engine run it is compared with (the device's
// speed drifts).
func rawMBps(b *testing.B, size int) float64 {
	mbps, err := diskprobe.Measure(b.TempDir(), size, 1, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	return mbps
}

func benchLog(b *testing.B, cache int64) *Log {
	l, err := Open(Options{FS: vfs.OS{}, Dir: filepath.Join(b.TempDir(), "s"), Stream: 1, TailCacheBytes: cache})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// userPayload is a TagUser entry of about size bytes.
func userPayload(size int) []byte {
	return userData(kbatch(1, size-1-kbHeaderSize, 1))
}

// groupEntries returns n entries of term 1 carrying data.
func groupEntries(n int, data []byte) []*pb.Entry {
	ents := make([]*pb.Entry, n)
	for k := range ents {
		ents[k] = &pb.Entry{Term: new(uint64(1)), Index: new(uint64(0)), Data: data}
	}
	return ents
}

// renumber gives ents the indexes from *next on.
func renumber(ents []*pb.Entry, next *uint64) {
	for _, e := range ents {
		*e.Index = *next
		*next++
	}
}

func BenchmarkEngineWriteSync(b *testing.B) {
	for _, es := range []int{1 << 10, 16 << 10} {
		for _, group := range []int{16 << 10, 256 << 10, mib} {
			b.Run(fmt.Sprintf("entry=%dK/group=%dK", es>>10, group>>10), func(b *testing.B) {
				raw := rawMBps(b, group)
				l := benchLog(b, 8*mib)
				defer l.Close()
				data := userPayload(es)
				per := group / es
				ents := groupEntries(per, data)
				idx := uint64(1)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					renumber(ents, &idx)
					if err := l.Write(ents, nil); err != nil {
						b.Fatal(err)
					}
					if _, err := l.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				mbps := float64(b.N*per*es) / mib / b.Elapsed().Seconds()
				b.ReportMetric(mbps, "MB/s")
				b.ReportMetric(raw, "raw-MB/s")
				b.ReportMetric(mbps/raw, "ratio-to-raw")
			})
		}
	}
}

// fillLog writes total bytes of es-byte entries, synced.
func fillLog(b *testing.B, l *Log, es, total int) {
	data := userPayload(es)
	var ents []*pb.Entry
	for i := 1; i <= total/es; i++ {
		ents = append(ents, &pb.Entry{Term: new(uint64(1)), Index: new(uint64(i)), Data: data})
		if len(ents) == 64 {
			if err := l.Write(ents, nil); err != nil {
				b.Fatal(err)
			}
			ents = ents[:0]
		}
	}
	if err := l.Write(ents, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		b.Fatal(err)
	}
}

func benchRead(b *testing.B, l *Log, from int64) {
	end := l.EndOffset()
	off, bytes := from, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bs, err := l.Read(off, end, mib)
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range bs {
			bytes += len(x.Data)
		}
		off = bs[len(bs)-1].NextOffset
		if off == end {
			off = from
		}
	}
	b.ReportMetric(float64(bytes)/mib/b.Elapsed().Seconds(), "MB/s")
}

func BenchmarkReadTailCache(b *testing.B) {
	l := benchLog(b, 64*mib)
	defer l.Close()
	fillLog(b, l, 16<<10, 32*mib)
	benchRead(b, l, 0) // all cached
}

func BenchmarkReadCatchUp(b *testing.B) {
	l := benchLog(b, mib)
	defer l.Close()
	fillLog(b, l, 16<<10, 128*mib)
	benchRead(b, l, 0) // all but the newest 1 MiB from the segment files
}

// BenchmarkEnginePipelined is the engine as the host drives it: one
// goroutine encodes and writes groups while another fsyncs what has been
// written (Sync runs its fdatasync without the writer lock). MB/s counts
// bytes known durable; raw is the same group size written and synced in
// turn on the same disk.
func BenchmarkEnginePipelined(b *testing.B) {
	for _, es := range []int{1 << 10, 16 << 10} {
		for _, group := range []int{256 << 10, mib} {
			b.Run(fmt.Sprintf("entry=%dK/group=%dK", es>>10, group>>10), func(b *testing.B) {
				raw := rawMBps(b, group)
				l := benchLog(b, 8*mib)
				defer l.Close()
				data := userPayload(es)
				per := group / es
				written := make(chan uint64, 1)
				errc := make(chan error, 1)
				go func() { // the syncer
					var err error
					for range written {
						if err == nil {
							_, err = l.Sync()
						}
					}
					errc <- err
				}()
				ents := groupEntries(per, data)
				idx := uint64(1)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					renumber(ents, &idx)
					if err := l.Write(ents, nil); err != nil {
						b.Fatal(err)
					}
					written <- idx // blocks while one written group waits: at most one behind
				}
				close(written)
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				mbps := float64(b.N*per*es) / mib / b.Elapsed().Seconds()
				b.ReportMetric(mbps, "MB/s")
				b.ReportMetric(raw, "raw-MB/s")
				b.ReportMetric(mbps/raw, "ratio-to-raw")
			})
		}
	}
}
