package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkCatchUpIsolation: a tailing consumer's end-to-end latency
// (produce call → record delivered to the consumer, one clock: the
// benchmark process) with one producer paced at 500 records/s of 1 KiB,
// idle and while another consumer reads a 200 MiB stream from offset 0
// over and over (franz-go defaults everywhere), alternated
// VDL_BENCH_ISO_ROUNDS times (default 3), 5 s each, after a warm-up
// phase of 3 s (not counted: the servers' work after the produce). Target: p99 during
// the catch-up within 2x of idle.
//
// The catch-up must come from the disk, not the tail cache: the clusters
// run with tail_cache_bytes = 16 MiB (tuned down, labelled; on defaults
// the budget holds the whole 200 MiB stream here), so the old stream is
// read from its segment files (dropped from the page cache once written:
// the leader's disk reads during the catch-up are printed). Four
// clusters, one after the other: catch-up reads unbounded
// (catchup_read_bytes = 1 GiB, not yielding to writes), the budget's
// default in flight not yielding, the default (yielding to writes), and
// a paced one (tuned: catchup_read_bytes_per_sec = 64 MiB, not yielding).
//
//	make bench-read
func BenchmarkCatchUpIsolation(b *testing.B) {
	total := int64(envInt(b, "VDL_BENCH_READ_MB", 200)) * mib
	rounds := envInt(b, "VDL_BENCH_ISO_ROUNDS", 3)
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break
		}
		fmt.Printf(`
Catch-up isolation: tailing consumer, end-to-end latency (produce call -> delivered), one producer
paced at 500 x 1 KiB records/s; idle and while another consumer reads %.0f MiB from offset 0 from the
disk (tail_cache_bytes = 16 MiB, tuned down so that it does), %d rounds of 5 s each (shared machine)
`, float64(total)/mib, rounds)
		for _, v := range []struct {
			name          string
			inFlight, bps int64
			noYield       bool
		}{
			{"unbounded (catchup_read_bytes = 1 GiB: no bound in practice; preads still of 1 MiB; not yielding)", 1 << 30, 0, true},
			{"in-flight (catchup_read_bytes = 16 MiB, the default, not yielding to writes)", 0, 0, true},
			{"default (16 MiB in flight, yielding to writes)", 0, 0, false},
			{"paced (tuned: catchup_read_bytes_per_sec = 64 MiB, not yielding)", 0, 64 * mib, true},
		} {
			ratio := isolationRun(b, v.name, total, rounds, v.inFlight, v.bps, v.noYield)
			b.ReportMetric(ratio, "p99-ratio-"+strings.Fields(v.name)[0])
		}
	}
}

// isolationRun runs one cluster through rounds of idle and catch-up
// phases, prints them and returns the p99 ratio over all rounds.
func isolationRun(b *testing.B, name string, total int64, rounds int, inFlight, bps int64, noYield bool) float64 {
	c := StartCluster(b, Options{Streams: []string{"old", "live"}, LogLevel: "warn", TailCacheBytes: 16 * mib,
		CatchUpReadBytes: inFlight, CatchUpReadBytesPerSec: bps, CatchUpReadsNoYield: noYield})
	defer c.StopAll()
	brokers := c.KafkaAddrs()
	produceBytes(b, brokers, "old", total)
	oldLeader, liveLeader := c.WaitLeader("old", 20*time.Second), c.WaitLeader("live", 20*time.Second)
	if liveLeader != oldLeader {
		// One server serves both consumers: the catch-up and the tail
		// share its process and its budget, not only the disk.
		liveLeader = colocate(b, c, "live", liveLeader, oldLeader)
	}
	n := c.Node(oldLeader)
	fmt.Printf("\n  %s (leaders: old on node %d, live on node %d)\n", name, oldLeader, liveLeader)
	var idleAll, duringAll []time.Duration
	tailLatency(b, brokers, 3*time.Second, nil) // warm-up
	for round := range rounds {
		idle := tailLatency(b, brokers, 5*time.Second, nil)
		var caughtUp atomic.Int64
		rb0 := n.ReadBytes()
		during := tailLatency(b, brokers, 5*time.Second, func(ctx context.Context) {
			for ctx.Err() == nil {
				cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
					kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"old": {0: kgo.NewOffset().At(0)}}))
				if err != nil {
					b.Error(err)
					return
				}
				for ctx.Err() == nil {
					fs := cl.PollFetches(ctx)
					fs.EachRecord(func(r *kgo.Record) { caughtUp.Add(int64(len(r.Value))) })
					if r := fs.Records(); len(r) > 0 && r[len(r)-1].Offset >= total/1024-1 {
						break // read it all: start over
					}
				}
				cl.Close()
			}
		})
		diskMB := float64(n.ReadBytes()-rb0) / mib
		pi, pd := pct(idle), pct(during)
		fmt.Printf("    round %d: idle p50 %6.2f p99 %6.2f ms; during catch-up (%5.0f MB/s, leader read %4.0f MB from disk) p50 %6.2f p99 %6.2f ms: %.1fx\n",
			round+1, ms(pi[0]), ms(pi[1]), float64(caughtUp.Load())/mib/5, diskMB, ms(pd[0]), ms(pd[1]), float64(pd[1])/float64(pi[1]))
		idleAll, duringAll = append(idleAll, idle...), append(duringAll, during...)
	}
	pi, pd := pct(idleAll), pct(duringAll)
	ratio := float64(pd[1]) / float64(pi[1])
	fmt.Printf("    all rounds: idle p50 %6.2f p99 %6.2f ms; during p50 %6.2f p99 %6.2f ms; p99 during / idle %.1fx, target <= 2x: %s\n",
		ms(pi[0]), ms(pi[1]), ms(pd[0]), ms(pd[1]), ratio, metStr(ratio <= 2))
	return ratio
}

// colocate moves stream's leadership from node from to node to (the
// admin API's transfer-leader) and returns the leader after it (from, if
// the transfer did not happen in 10 s: printed as it is).
func colocate(b *testing.B, c *Cluster, stream string, from, to uint64) uint64 {
	n := c.Node(from)
	resp, err := n.AdminClient.Post(fmt.Sprintf("%s/streams/%s/transfer-leader?to=%d", n.AdminBase, stream, to), "", nil)
	if err != nil {
		b.Logf("transfer-leader: %v", err)
		return from
	}
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.WaitLeader(stream, 10*time.Second); l == to {
			return l
		}
		time.Sleep(50 * time.Millisecond) // polling the leader's status: no event to wait on from here
	}
	return c.WaitLeader(stream, 10*time.Second)
}

// pct is the p50 and p99 of sorted latencies.
func pct(lat []time.Duration) [2]time.Duration {
	slices.Sort(lat)
	return [2]time.Duration{lat[len(lat)/2], lat[len(lat)*99/100]}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// tailLatency runs a paced producer and a tailing consumer of "live" for
// d (with background running beside them, if set) and returns the
// records' end-to-end latencies, sorted.
func tailLatency(b *testing.B, brokers []string, d time.Duration, background func(context.Context)) []time.Duration {
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"live": {0: kgo.NewOffset().AtEnd()}}))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("live"))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	// The consumer's position is at the end once a first record comes back.
	if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: make([]byte, 1024)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cons.PollFetches(context.Background())
	var bg sync.WaitGroup
	if background != nil {
		bg.Go(func() { background(ctx) })
	}
	start := time.Now()
	var lat []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				sent := time.Duration(binary.BigEndian.Uint64(r.Value))
				lat = append(lat, now.Sub(start)-sent)
			})
		}
	}()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		<-tick.C
		v := make([]byte, 1024)
		binary.BigEndian.PutUint64(v, uint64(time.Since(start)))
		prod.Produce(ctx, &kgo.Record{Value: v}, nil)
	}
	<-done
	bg.Wait() // the background's clients closed before the next phase
	if len(lat) == 0 {
		b.Fatal("no record delivered")
	}
	slices.Sort(lat)
	return lat
}
