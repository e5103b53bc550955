package server

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/configserver"
)

// BenchmarkIdleStreamObjects counts the heap objects an idle stream keeps
// on each server that hosts it: every GC cycle marks them, so with
// thousands of idle streams their number, not their bytes, is what the
// hot streams beside them pay (docs/operations.md, Sizing). Three servers
// and three config servers in this process on default settings create
// VDL_BENCH_STREAMS streams (default 300) and let them quiesce; the figure
// is the live objects they added, per stream and server (the config
// servers' share included: in production they are other processes).
// VDL_BENCH_OBJECTS_PROFILE writes an exact heap profile of the idle
// cluster (every allocation sampled): go tool pprof -sample_index=inuse_objects.
func BenchmarkIdleStreamObjects(b *testing.B) {
	n := 300
	if v, err := parsePositive(os.Getenv("VDL_BENCH_STREAMS")); err == nil {
		n = v
	}
	profile := os.Getenv("VDL_BENCH_OBJECTS_PROFILE")
	if profile != "" {
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1
	}
	for range b.N {
		c, cc := benchCluster(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		require.Eventually(b, func() bool { // until the servers registered
			_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: "first"})
			return err == nil
		}, 30*time.Second, 200*time.Millisecond)
		waitLed(b, c, 1, time.Now())
		time.Sleep(3 * time.Second) // the first stream quiet
		objects0 := liveObjects()
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("idle%05d", i))
		}
		start := time.Now()
		createStreams(b, ctx, cc, names)
		waitLed(b, c, n+1, start)
		time.Sleep(5 * time.Second) // elections settle, groups quiesce, reports answered
		per := float64(liveObjects()-objects0) / float64(3*n)
		if profile != "" {
			writeHeap(b, profile)
		}
		cancel()
		b.ReportMetric(per, "objects-per-idle-stream")
		b.Logf("%d idle streams: %.1f heap objects per stream and server", n, per)
	}
}

// liveObjects is the number of objects on the heap after a collection.
func liveObjects() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapObjects)
}

func parsePositive(s string) (int, error) {
	var v int
	if _, err := fmt.Sscan(s, &v); err != nil || v <= 0 {
		return 0, fmt.Errorf("not a positive number: %q", s)
	}
	return v, nil
}
