package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/selfcpu"
)

// BenchmarkCatchUpStreams: catchUpStreams with ten streams of
// VDL_BENCH_READ_MB / 2 MiB each (default 100: 1 GB in all).
//
//	make bench-read
func BenchmarkCatchUpStreams(b *testing.B) {
	per := int64(envInt(b, "VDL_BENCH_READ_MB", 200)) * mib / 2
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break // one run is the measurement; -benchtime 1x
		}
		consume, raw, cold := catchUpStreams(b, 10, per)
		b.ReportMetric(consume, "catchup10-MB/s")
		b.ReportMetric(raw, "raw10-MB/s")
		b.ReportMetric(cold, "coldread-MB/s")
		b.ReportMetric(100*consume/cold, "catchup10-%-of-cold")
	}
}

// catchUpStreams is BenchmarkReadDefaults' catch-up with more than one
// fetch in flight: streams streams of perStream bytes each (1 KiB
// values), their leaders spread over the three servers, read from offset
// 0 by one franz-go consumer with default options (1 MiB per partition, a
// fetch per broker in flight), beside a cold sequential read of one
// server's segment files (one copy of every stream) in the same run. The
// single stream's catch-up is bound by the round trip of one 1 MiB fetch
// at a time (docs/performance.md); here the client asks the three leaders
// for every stream at once, as a consumer of several streams does.
// tail_cache_bytes = 16 MiB (tuned down, labelled) so the reads come from
// the segment files, the page cache dropped before each read. Raw fetch
// loops (one per leader at once, 1 MiB per partition, records not
// decoded) read the same streams after it: the servers' side of the
// catch-up without the consumer's work. With VDL_BENCH_PROFILE the first
// run profiles server 1 and the consumer's process.
func catchUpStreams(b *testing.B, streams int, perStream int64) (consume, raw, cold float64) {
	var names []string
	for i := range streams {
		names = append(names, fmt.Sprintf("c%02d", i))
	}
	c := StartCluster(b, Options{Streams: names, LogLevel: "warn", TailCacheBytes: 16 * mib})
	defer c.StopAll()
	brokers := c.KafkaAddrs()
	// Leaders round robin over the servers: wherever the elections put
	// them, one server could lead most streams and be the whole read.
	leaders, ledBy := map[uint64]int{}, map[string]uint64{}
	for i, s := range names {
		l := c.WaitLeader(s, 20*time.Second)
		if want := uint64(i%3 + 1); l != want {
			l = colocate(b, c, s, l, want)
		}
		leaders[l]++
		ledBy[s] = l
	}
	produceStreams(b, brokers, names, perStream)
	ranges := map[string][2]int64{}
	for _, s := range names {
		st, err := c.StreamStatus(c.WaitLeader(s, 20*time.Second), s)
		if err != nil {
			b.Fatal(err)
		}
		ranges[s] = [2]int64{0, st.HighWatermark}
	}
	fmt.Printf("\n  catch-up of %d streams (%.0f MiB each, leaders per server %v) by one franz-go consumer, defaults\n"+
		"  (1 MiB per partition), tail_cache_bytes = 16 MiB (tuned down: the reads come from the segment files)\n",
		streams, float64(perStream)/mib, leaders)
	for run := range 2 {
		if err := dropPageCache(); err != nil {
			b.Logf("page cache not dropped: %v", err)
		}
		var rb0 int64
		for id := uint64(1); id <= 3; id++ {
			rb0 += c.Node(id).ReadBytes()
		}
		stopProfile := func() {}
		if prof := os.Getenv("VDL_BENCH_PROFILE"); prof != "" && run == 0 {
			go leaderProfile(b, c.Node(1), prof+".catchup10", 3)
			stopProfile = clientProfile(b, prof+".catchup10.consumer")
		}
		cpu0, self0, t0 := c.CPUSeconds(), selfcpu.Used().Seconds(), time.Now()
		_, mbps := readRanges(b, ranges, kgo.SeedBrokers(brokers...))
		secs := time.Since(t0).Seconds()
		stopProfile()
		servers, client := (c.CPUSeconds()-cpu0)/secs, (selfcpu.Used().Seconds()-self0)/secs
		var rb1 int64
		for id := uint64(1); id <= 3; id++ {
			rb1 += c.Node(id).ReadBytes()
		}
		if err := dropPageCache(); err != nil {
			b.Logf("page cache not dropped: %v", err)
		}
		cpu0, t0 = c.CPUSeconds(), time.Now()
		rawMBps := rawCatchUp(b, brokers, ledBy, ranges)
		rawServers := (c.CPUSeconds() - cpu0) / time.Since(t0).Seconds()
		coldMBps := coldReadMBps(b, c.Node(1).DataDir)
		fmt.Printf("    from offset 0, run %d: %7.1f MB/s (the servers read %.0f MB from disk; servers %.2f cores, consumer %.2f);\n"+
			"      raw fetch loops, one per leader (records not decoded) %7.1f MB/s (servers %.2f cores);\n"+
			"      cold read of one server's segments %7.1f MB/s\n",
			run+1, mbps, float64(rb1-rb0)/mib, servers, client, rawMBps, rawServers, coldMBps)
		consume, raw, cold = max(consume, mbps), max(raw, rawMBps), max(cold, coldMBps)
	}
	fmt.Printf("    catch-up of %d streams / cold read: %.0f %% (best of 2 each), target >= 80 %%: %s; the raw loops %.0f %%\n",
		streams, 100*consume/cold, metStr(consume >= 0.8*cold), 100*raw/cold)
	return consume, raw, cold
}

// rawCatchUp reads every stream of ranges from offset 0 with raw fetch
// loops (rawFetches, 1 MiB per partition), one per leader at once (ledBy:
// stream -> leader), and returns MiB/s.
func rawCatchUp(b *testing.B, brokers []string, ledBy map[string]uint64, ranges map[string][2]int64) float64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	byLeader := map[uint64]map[string]int64{}
	for s, l := range ledBy {
		if byLeader[l] == nil {
			byLeader[l] = map[string]int64{}
		}
		byLeader[l][s] = ranges[s][1]
	}
	var total atomic.Int64
	errs := make(chan error, len(byLeader))
	var wg sync.WaitGroup
	start := time.Now()
	for l, ends := range byLeader {
		wg.Go(func() {
			n, _, err := rawFetches(cl, int32(l), ends, 1<<20)
			total.Add(n)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return float64(total.Load()) / mib / time.Since(start).Seconds()
}

// loaderOpts are the options of the producers that load data for a
// benchmark (tuned, not what it measures): acks=all, no compression,
// linger 1 ms, 1 MiB batches, 2048 records buffered.
func loaderOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond),
		kgo.MaxBufferedRecords(2048), kgo.ProducerBatchMaxBytes(1 << 20)}
}

// produceStreams produces about perStream bytes of 1 KiB values into each
// stream, 4 clients each writing to all of them.
func produceStreams(b *testing.B, brokers, streams []string, perStream int64) {
	value := make([]byte, 1<<10)
	_, _ = rand.Read(value)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var sent, failed atomic.Int64
	total := perStream * int64(len(streams))
	var wg sync.WaitGroup
	for range 4 {
		cl, err := kgo.NewClient(loaderOpts(brokers)...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; sent.Add(int64(len(value))) <= total; i++ {
				rec := &kgo.Record{Topic: streams[i%len(streams)], Value: value}
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d produces failed", n)
	}
}
