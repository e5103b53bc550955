package server

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// What BenchmarkStreams measures besides throughput: descriptors, disk,
// heap, CPU and profiles of a process running three servers.

// raiseFileLimit raises this process's descriptor limit to at least n
// (root may raise the hard limit too): the benchmark runs three servers in
// one process, which a deployment gives a limit each (LimitNOFILE=65536 in
// deploy/), and a restarted server's groups all elect at once, each
// writing its vote to its log's active segment.
func raiseFileLimit(b *testing.B, n int) {
	var lim syscall.Rlimit
	require.NoError(b, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur >= uint64(n) {
		return
	}
	want := syscall.Rlimit{Cur: uint64(n), Max: max(lim.Max, uint64(n))}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		b.Logf("descriptor limit %d kept (raising it to %d: %v): a restart at this scale may run out", lim.Cur, n, err)
	}
}

// watchOpenFiles samples the process's descriptors every 50 ms until the
// returned function is called, which reports the most seen and what they
// were then.
func watchOpenFiles(c *testCluster) func() (int, string) {
	done := make(chan struct{})
	var mu sync.Mutex
	most, peak := 0, ""
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if n := openFiles(); n > most {
				kinds := c.openFilesByKind()
				mu.Lock()
				most, peak = n, kinds
				mu.Unlock()
			}
		}
	}()
	return func() (int, string) {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return most, peak
	}
}

// openFiles is how many descriptors this process has open.
func openFiles() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// openFilesByKind counts this process's descriptors by server (data dir)
// and kind (file extension, or what else they are), for a restart's peak.
func (c *testCluster) openFilesByKind() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	counts := map[string]int{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		kind := "other"
		for i, cfg := range c.cfgs {
			if strings.HasPrefix(target, cfg.DataDir+"/") {
				kind = fmt.Sprintf("server %d %s", i+1, filepath.Ext(target))
			}
		}
		if strings.HasPrefix(target, "socket:") {
			kind = "socket"
		}
		counts[kind]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(out, ", ")
}

// diskUsed is the disk the servers' data dirs take (allocated blocks),
// leaving out the stream directories in except (streamDirs): the hot
// streams' retention deletes segments while idle streams are created.
func (c *testCluster) diskUsed(b *testing.B, except map[string]bool) int64 {
	var total int64
	for _, cfg := range c.cfgs {
		err := filepath.WalkDir(cfg.DataDir, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && except[p]:
				return fs.SkipDir
			case d.IsDir():
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
			return nil
		})
		require.NoError(b, err)
	}
	return total
}

// streamDirs is the set of the servers' stream directories now.
func (c *testCluster) streamDirs(b *testing.B) map[string]bool {
	dirs := map[string]bool{}
	for _, cfg := range c.cfgs {
		ents, err := os.ReadDir(filepath.Join(cfg.DataDir, "streams"))
		require.NoError(b, err)
		for _, e := range ents {
			dirs[filepath.Join(cfg.DataDir, "streams", e.Name())] = true
		}
	}
	return dirs
}

// debugEvery prints, every d, each server's groups by role, the highest
// term, and its transport's drops and queues: what a long run is doing.
func (c *testCluster) debugEvery(ctx context.Context, d time.Duration) {
	for ctx.Err() == nil {
		time.Sleep(d)
		for i, s := range c.servers {
			if s == nil {
				continue
			}
			roles := map[string]int{}
			var maxTerm uint64
			for _, gs := range s.host.Statuses() {
				roles[gs.Role]++
				if gs.Leader == 0 {
					roles["no leader"]++
				}
				maxTerm = max(maxTerm, gs.Term)
			}
			var tr []string
			for id, ps := range s.transport.Stats() {
				tr = append(tr, fmt.Sprintf("to %d: dropped %d queued %d sent %d reconnects %d dial failures %d", id, ps.Dropped, ps.QueuedBytes, ps.SentFrames, ps.Reconnects, ps.DialFailures))
			}
			slices.Sort(tr)
			fmt.Fprintf(os.Stderr, "debug: server %d roles %v max term %d; %s\n", i+1, roles, maxTerm, strings.Join(tr, "; "))
		}
	}
}

// profileTo writes a CPU profile, until stop, to the file the environment
// variable env names (none if unset): VDL_BENCH_CPUPROFILE for the idle
// window (what idle streams cost), VDL_BENCH_HOTPROFILE for the hot load
// beside them, VDL_BENCH_BEFOREPROFILE for the hot load before them.
func profileTo(b *testing.B, env string) (stop func()) {
	path := os.Getenv(env)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, pprof.StartCPUProfile(f))
	writeHeap(b, path+".heap0")
	return func() {
		pprof.StopCPUProfile()
		require.NoError(b, f.Close())
		writeHeap(b, path+".heap1") // go tool pprof -sample_index=alloc_space -base X.heap0 X.heap1: the window's allocations
	}
}

func writeHeap(b *testing.B, path string) {
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, pprof.Lookup("heap").WriteTo(f, 0))
	require.NoError(b, f.Close())
}

// gcFigures reads the runtime's collection counters; since(earlier) says
// what a window cost the collector: cycles, bytes allocated and the CPU
// the collector used (the hot load beside idle streams pays its marking),
// and of that CPU the share of idle marking: the runtime marks on a
// processor with nothing else to run, which costs the load nothing.
// scan is the heap the last cycle had to scan (objects holding pointers).
type gcFigures struct{ cycles, allocated, gcCPU, idleCPU, allCPU, scan float64 }

func readGC() gcFigures {
	ss := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/gc/scan/heap:bytes"}}
	rtmetrics.Read(ss)
	f := func(i int) float64 {
		if ss[i].Value.Kind() == rtmetrics.KindFloat64 {
			return ss[i].Value.Float64()
		}
		return float64(ss[i].Value.Uint64())
	}
	return gcFigures{cycles: f(0), allocated: f(1), gcCPU: f(2), idleCPU: f(3), allCPU: f(4), scan: f(5)}
}

func (g gcFigures) since(earlier gcFigures) string {
	all := g.allCPU - earlier.allCPU
	if all <= 0 { // the runtime updates its CPU figures at the end of a cycle
		return fmt.Sprintf("GC: %.0f cycles, %.0f MB allocated, %.0f MB of heap to scan",
			g.cycles-earlier.cycles, (g.allocated-earlier.allocated)/1e6, g.scan/1e6)
	}
	return fmt.Sprintf("GC: %.0f cycles, %.0f MB allocated, %.1f%% of the CPU spent collecting (%.1f%% marking on idle processors), %.0f MB of heap to scan",
		g.cycles-earlier.cycles, (g.allocated-earlier.allocated)/1e6, (g.gcCPU-earlier.gcCPU)/all*100, (g.idleCPU-earlier.idleCPU)/all*100, g.scan/1e6)
}

// stateHeap is the heap in use after a collection, less what the servers'
// tail caches hold: the streams' state. The caches hold the hot streams'
// newest records, as much as their budget allows and more or less of it
// from one moment to the next, which at a few hundred idle streams was
// more than the streams' state (a negative figure per stream). An idle
// stream's own few cached entries (its elections' empty entries, a few
// hundred bytes) are left out with them: they are the tail-cache budget's,
// sized apart from the streams' state (docs/operations.md, Memory). Two
// collections: the first only moves the sync.Pools' buffers (frames of up
// to 8 MiB) to their victim caches, the second drops them.
func (c *testCluster) stateHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := int64(ms.HeapInuse)
	for _, s := range c.servers {
		if s != nil {
			heap -= s.tailBudget.Used()
		}
	}
	return heap
}

// settledHeap is stateHeap once the hot load's leftovers are gone (its
// clients' connections closed, their buffers and in-flight entries
// released): measured each second until it moves by less than 1% (at
// most 20 s). Taken at once after the load, at 300 idle streams the
// figure per stream came out negative.
func (c *testCluster) settledHeap() int64 {
	prev := c.stateHeap()
	for range 20 {
		time.Sleep(time.Second)
		h := c.stateHeap()
		if d := h - prev; d < prev/100 && -d < prev/100 {
			return h
		}
		prev = h
	}
	return prev
}

// hotLeaders says which server leads each hot stream and how often their
// leaders changed so far (a balancer moving them would show here).
func (c *testCluster) hotLeaders(hot []string) string {
	led := map[uint64]int{}
	var changes uint64
	for _, name := range hot {
		for _, s := range c.servers {
			if s == nil {
				continue
			}
			sc, ok := s.dir.Stream(name)
			if !ok {
				continue
			}
			if st, ok := s.host.Status(sc.ID); ok && st.Role == "StateLeader" {
				led[s.cfg.NodeID]++
				changes += st.LeaderChanges
			}
		}
	}
	return fmt.Sprintf("led by server %v, %d leader changes", led, changes)
}

// dumpGoroutinesAfter writes every goroutine's stack, after d, to the file
// the environment variable env names (nothing if unset): where a slow
// phase waits.
func dumpGoroutinesAfter(b *testing.B, env string, d time.Duration) {
	path := os.Getenv(env)
	if path == "" {
		return
	}
	time.AfterFunc(d, func() {
		f, err := os.Create(path)
		if err != nil {
			b.Log(err)
			return
		}
		defer f.Close()
		_ = pprof.Lookup("goroutine").WriteTo(f, 1)
	})
}
