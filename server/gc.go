package server

import (
	"os"
	"runtime/debug"
)

// The garbage collector of a server process (docs/operations.md, Memory).
//
// A collection marks every pointer in the heap, and a server's heap is
// mostly two things: the tail cache (large byte buffers, which the
// collector does not scan) and the state of each stream it hosts (small,
// pointer-rich objects: a raft group, a log, their bookkeeping), 16-21 KiB per
// idle stream. The data path allocates several bytes per byte produced
// (request frames, Raft entries, the followers' decoded messages), so
// collections follow one another as fast as produce allocates. With
// Go's default GOGC=100 a cycle starts once the heap has grown by what is
// live; beside 10,000 idle streams, marking their state at every cycle
// took 10% of the CPU of a hot load (BenchmarkStreams: produce at 68% of
// the same load without the idle streams).
//
// A server runs on a machine sized for it, so it lets the heap grow by
// gcPercent of what is live between cycles (half as many cycles), and
// caps the heap at a quarter of the memory (a soft limit: the collector
// runs more often as the heap nears it, so a small machine pays in CPU,
// not in memory). The operator's GOGC or GOMEMLIMIT wins over both.
//
// Not more: at GOGC 400 (a fifth as many cycles; beside 10,000 idle
// streams, hot produce at 84-88% of alone instead of 68%), one stream's
// produce on three server processes (BenchmarkProduceDefaults) fell from
// 148-181 MB/s to 103-117 MB/s, using more CPU: the servers copied into
// memory that was fresh to the VM far more often (runtime.memmove slower
// per byte). At 200 it is 173-187 MB/s, as at 100 or better.
const (
	gcPercent       = 200
	gcMemoryDivisor = 4
)

// TuneGC sets the collector for a process hosting servers servers (one for
// `vdl server`; a benchmark hosting three in one process gives each its
// share, as three processes would have). undo restores what was before.
func TuneGC(servers int) (undo func()) {
	percent, limit := -2, int64(-1) // unchanged
	if os.Getenv("GOGC") == "" {
		percent = debug.SetGCPercent(gcPercent)
	}
	if mem := memoryLimit(); mem > 0 && os.Getenv("GOMEMLIMIT") == "" {
		limit = debug.SetMemoryLimit(int64(servers) * mem / gcMemoryDivisor)
	}
	return func() {
		if percent != -2 {
			debug.SetGCPercent(percent)
		}
		if limit >= 0 {
			debug.SetMemoryLimit(limit)
		}
	}
}
