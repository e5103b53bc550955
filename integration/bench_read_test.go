package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/internal/proccluster"
	"github.com/vdl-project/vdl/kafka/records"
)

// BenchmarkReadDefaults: consume with franz-go's default consumer (1 MiB
// per-partition fetches), each figure beside its limit measured in the
// same run (the machine is shared: the ratios are what to look at).
// VDL_BENCH_READ_MB (default 200) MiB of 1 KiB values are produced, then
// read from offset 0 twice, then the leader's segment files are read
// cold (1 MiB reads after dropping the page cache: the disk's limit).
//
//   - defaults: the default server config. Its tail cache budget (a
//     sixteenth of memory, at most 512 MiB) holds the whole stream here,
//     so reading from offset 0 is the tailing read of a consumer some
//     seconds behind; the leader's disk reads during it are reported.
//   - disk: tail_cache_bytes = 16 MiB (tuned down, labelled), so the same
//     read is a catch-up from the segment files.
//
// A raw loop of 1 MiB Fetch requests (records not decoded) shows the
// server's side without the client's decoding, with the leader's mean
// Fetch stages.
//
//	make bench-read   # go test -run '^$' -bench BenchmarkReadDefaults -benchtime 1x ./integration/
func BenchmarkReadDefaults(b *testing.B) {
	total := int64(envInt(b, "VDL_BENCH_READ_MB", 200)) * mib
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break // one run is the measurement; -benchtime 1x
		}
		fmt.Printf("\nVDL read benchmark: 3 vdl processes, franz-go default consumer (1 MiB per-partition fetches),\n"+
			"%.0f MiB of 1 KiB values produced first (MB = MiB; shared machine: compare each figure with its\n"+
			"limit from the same run)\n", float64(total)/mib)
		def := readRun(b, "defaults", 0, total)
		disk := readRun(b, "disk (tuned: tail_cache_bytes = 16 MiB)", 16*mib, total)
		b.ReportMetric(def.consume, "tail-MB/s")
		b.ReportMetric(def.diskRead/mib, "tail-disk-read-MB")
		b.ReportMetric(disk.consume, "catchup-MB/s")
		b.ReportMetric(disk.cold, "coldread-MB/s")
		b.ReportMetric(100*disk.consume/disk.cold, "catchup-%-of-cold")
	}
}

type readResult struct {
	consume, raw, cold, diskRead float64
}

// readRun runs one cluster (tailCache 0: the default) through the
// produce, the two reads and the cold read, prints and returns the best
// of each.
func readRun(b *testing.B, name string, tailCache, total int64) readResult {
	const stream = "bench"
	c := StartCluster(b, Options{Streams: []string{stream}, LogLevel: "warn", TailCacheBytes: tailCache})
	defer c.StopAll()
	brokers := c.KafkaAddrs()
	produceBytes(b, brokers, stream, total)
	leader := c.WaitLeader(stream, 20*time.Second)
	ls, err := c.StreamStatus(leader, stream)
	if err != nil {
		b.Fatal(err)
	}
	hwm := ls.HighWatermark
	n := c.Node(leader)
	var r readResult
	fmt.Printf("\n  %s\n", name)
	for run := range 2 {
		stopProfile := func() {}
		if prof := os.Getenv("VDL_BENCH_PROFILE"); prof != "" && run == 0 {
			go leaderProfile(b, n, prof+"."+strings.Fields(name)[0], 4)
			stopProfile = clientProfile(b, prof+"."+strings.Fields(name)[0]+".consumer")
		}
		if run > 0 && tailCache != 0 {
			// The cold read before left the files in the page cache:
			// catch up from the disk again.
			if err := dropPageCache(); err != nil {
				b.Logf("page cache not dropped: %v", err)
			}
		}
		rb0 := n.ReadBytes()
		_, mbps := readRangeWith(b, stream, 0, hwm, kgo.SeedBrokers(brokers...))
		stopProfile()
		diskRead := float64(n.ReadBytes() - rb0)
		st0 := fetchStages(b, n)
		rawMBps, p50, p90 := rawFetchLoop(b, brokers, int32(leader), stream, hwm)
		st1 := fetchStages(b, n)
		fmt.Printf("    from offset 0, run %d: franz-go %7.1f MB/s (leader read %.0f MB from disk); raw fetch loop %7.1f MB/s,\n"+
			"      p50 %.2f ms p90 %.2f ms per fetch; leader's mean Fetch stages:", run+1, mbps, diskRead/mib, rawMBps, p50, p90)
		for _, stage := range []string{"queue", "local", "remote", "response_queue", "send"} {
			d0, d1 := st0[stage], st1[stage]
			if k := d1[1] - d0[1]; k > 0 {
				fmt.Printf(" %s %.2f", stage, 1000*(d1[0]-d0[0])/k)
			}
		}
		fmt.Println(" ms")
		if mbps > r.consume {
			r.consume, r.diskRead = mbps, diskRead
		}
		r.raw = max(r.raw, rawMBps)
		r.cold = max(r.cold, coldReadMBps(b, n.DataDir))
	}
	fmt.Printf("    cold sequential read of the leader's segment files: %.1f MB/s (best of 2; 1 MiB reads, page cache dropped)\n", r.cold)
	if tailCache == 0 {
		fmt.Printf("    tailing read from the tail cache: %.1f MB/s, target >= 1 GB/s: %s; %.0f %% of the cold read\n",
			r.consume, metStr(r.consume >= 1000*1000*1000/mib), 100*r.consume/r.cold)
	} else {
		fmt.Printf("    catch-up / cold read: %.0f %%, target >= 80 %%: %s\n", 100*r.consume/r.cold, metStr(r.consume >= 0.8*r.cold))
	}
	return r
}

func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// produceBytes produces about total bytes of 1 KiB values with 4 clients.
func produceBytes(b *testing.B, brokers []string, stream string, total int64) {
	produceStreams(b, brokers, []string{stream}, total)
}

// readRangeWith consumes [from, to) with a partition consumer made of
// opts (client defaults otherwise) and returns MiB read and MiB/s, timed
// from the first records.
func readRangeWith(b *testing.B, stream string, from, to int64, opts ...kgo.Opt) (float64, float64) {
	return readRanges(b, map[string][2]int64{stream: {from, to}}, opts...)
}

// readRanges consumes each stream's [from, to) with one consumer made of
// opts (client defaults otherwise) and returns MiB read and MiB/s, timed
// from the first records.
func readRanges(b *testing.B, ranges map[string][2]int64, opts ...kgo.Opt) (float64, float64) {
	parts := map[string]map[int32]kgo.Offset{}
	var want int64
	for s, r := range ranges {
		parts[s] = map[int32]kgo.Offset{0: kgo.NewOffset().At(r[0])}
		want += r[1] - r[0]
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(parts))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var n, bytes, firstBytes int64
	var start time.Time
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("read of %v stuck at %d of %d records", ranges, n, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { b.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset < ranges[rec.Topic][1] {
				n++
				bytes += int64(len(rec.Value))
			}
		})
		if start.IsZero() && n > 0 {
			start, firstBytes = time.Now(), bytes
		}
	}
	return float64(bytes) / mib, float64(bytes-firstBytes) / mib / time.Since(start).Seconds()
}

// coldReadMBps reads every segment file under dir sequentially with 1 MiB
// reads after dropping the page cache (root only; otherwise the figure is
// labelled warm in the log) and returns MiB/s: what the disk gives a
// sequential reader of the same files.
func coldReadMBps(b *testing.B, dir string) float64 {
	var files []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && filepath.Ext(p) == ".seg" {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	if err := dropPageCache(); err != nil {
		b.Logf("cold read is not cold: %v", err)
	}
	buf := make([]byte, 1<<20)
	var n int64
	start := time.Now()
	for _, p := range files {
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
		}
		_ = f.Close()
	}
	return float64(n) / mib / time.Since(start).Seconds()
}

func dropPageCache() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// leaderProfile saves a CPU profile of n (its admin API's pprof) of secs
// seconds to path (VDL_BENCH_PROFILE): the profile behind a figure.
func leaderProfile(b *testing.B, n *proccluster.Node, path string, secs int) {
	cl := *n.AdminClient
	cl.Timeout = time.Duration(secs+30) * time.Second // the admin client's own is shorter than a profile
	resp, err := cl.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", n.AdminBase, secs))
	if err != nil {
		b.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.Logf("profile: %v", err)
	}
}

// clientProfile writes this process's CPU profile (the clients') to path
// until stop is called.
func clientProfile(b *testing.B, path string) (stop func()) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		b.Logf("profile: %v", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// rawFetchLoop reads [0, hwm) with Fetch requests of 1 MiB (the newest
// version, one at a time, the records not decoded): the server's side of
// a catch-up without the client's decoding, asked of the leader. It
// returns MiB/s and the p50 and p90 of the fetch latency in ms.
func rawFetchLoop(b *testing.B, brokers []string, leader int32, stream string, hwm int64) (float64, float64, float64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	bytes, lat, err := rawFetches(cl, leader, map[string]int64{stream: hwm}, int32(envInt(b, "VDL_BENCH_RAW_FETCH_MB", 1))<<20)
	if err != nil {
		b.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return float64(bytes) / mib / secs, ms(lat[len(lat)/2]), ms(lat[len(lat)*9/10])
}

// rawFetches reads every stream of ends (stream -> high watermark) from
// offset 0 with Fetch requests to leader, one at a time, each asking
// every stream not yet read for fetchBytes (1 MiB: the clients' default;
// VDL_BENCH_RAW_FETCH_MB in tuned runs, as larger fetches amortize the
// round trip), as a consumer asks a broker for its partitions: the records
// are not decoded. It returns the bytes read and each fetch's latency.
func rawFetches(cl *kgo.Client, leader int32, ends map[string]int64, fetchBytes int32) (int64, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	next := map[string]int64{}
	for s := range ends {
		next[s] = 0
	}
	var lat []time.Duration
	var bytes int64
	for len(next) > 0 {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, 50<<20
		for _, s := range slices.Sorted(maps.Keys(next)) {
			t := kmsg.NewFetchRequestTopic()
			t.Topic = s
			p := kmsg.NewFetchRequestTopicPartition()
			p.FetchOffset, p.PartitionMaxBytes, p.LogStartOffset, p.CurrentLeaderEpoch = next[s], fetchBytes, -1, -1
			t.Partitions = append(t.Partitions, p)
			req.Topics = append(req.Topics, t)
		}
		t0 := time.Now()
		kresp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return bytes, lat, err
		}
		lat = append(lat, time.Since(t0))
		got := 0
		for _, t := range kresp.(*kmsg.FetchResponse).Topics {
			if len(t.Partitions) != 1 {
				return bytes, lat, fmt.Errorf("raw fetch of %s: %d partitions answered", t.Topic, len(t.Partitions))
			}
			rp := t.Partitions[0]
			if rp.ErrorCode != 0 {
				return bytes, lat, fmt.Errorf("raw fetch of %s at %d: error %d", t.Topic, next[t.Topic], rp.ErrorCode)
			}
			got += len(rp.RecordBatches)
			for h := range records.Batches(rp.RecordBatches) {
				next[t.Topic] = h.NextOffset()
			}
			if next[t.Topic] >= ends[t.Topic] {
				delete(next, t.Topic)
			}
		}
		if got == 0 { // everything asked for is committed: no progress is a failure
			return bytes, lat, fmt.Errorf("raw fetch from node %d: no records for %v", leader, next)
		}
		bytes += int64(got)
	}
	return bytes, lat, nil
}

// fetchStages scrapes n's Fetch request stage histograms: stage -> {sum
// seconds, count}.
func fetchStages(b *testing.B, n *proccluster.Node) map[string][2]float64 {
	out := map[string][2]float64{}
	resp, err := n.AdminClient.Get(n.AdminBase + "/metrics")
	if err != nil {
		b.Logf("metrics: %v", err)
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "vdl_kafka_request_stage_duration_seconds_") || !strings.Contains(line, `api="Fetch"`) {
			continue
		}
		i := strings.Index(line, `stage="`)
		stage := line[i+7:]
		stage = stage[:strings.IndexByte(stage, '"')]
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		e := out[stage]
		switch {
		case strings.HasPrefix(line, "vdl_kafka_request_stage_duration_seconds_sum"):
			e[0] = v
		case strings.HasPrefix(line, "vdl_kafka_request_stage_duration_seconds_count"):
			e[1] = v
		}
		out[stage] = e
	}
	return out
}
