package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkCatchUpIsolation: a tailing consumer's end-to-end latency
// (produce call → record delivered to the consumer, one clock: the
// benchmark process) with one producer paced at 500 records/s of 1 KiB,
// first idle, then while another consumer reads a 200 MiB stream from
// offset 0 over and over (franz-go defaults everywhere, default server
// config). Target: p99 during the catch-up within 2x of idle.
//
//	make bench-read
func BenchmarkCatchUpIsolation(b *testing.B) {
	total := int64(envInt(b, "VDL_BENCH_READ_MB", 200)) * mib
	for i := 0; i < b.N; i++ {
		if i > 0 {
			break
		}
		c := StartCluster(b, Options{Streams: []string{"old", "live"}, LogLevel: "warn"})
		brokers := c.KafkaAddrs()
		produceBytes(b, brokers, "old", total)
		idle := tailLatency(b, brokers, 5*time.Second, nil)
		var mu sync.Mutex
		caughtUp := 0.0
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
					fs.EachRecord(func(r *kgo.Record) {
						mu.Lock()
						caughtUp += float64(len(r.Value))
						mu.Unlock()
					})
					if r := fs.Records(); len(r) > 0 && r[len(r)-1].Offset >= total/1024-1 {
						break // read it all: start over
					}
				}
				cl.Close()
			}
		})
		mu.Lock()
		readMBps := caughtUp / mib / 5
		mu.Unlock()
		ratio := float64(during[1]) / float64(idle[1])
		b.ReportMetric(ms(idle[1]), "idle-p99-ms")
		b.ReportMetric(ms(during[1]), "catchup-p99-ms")
		b.ReportMetric(ratio, "p99-ratio")
		fmt.Printf(`
Catch-up isolation on defaults: tailing consumer, end-to-end latency (produce call -> delivered),
one producer paced at 500 x 1 KiB records/s, 5 s each (shared machine)

  idle                                   p50 %6.2f ms  p99 %6.2f ms
  while another consumer reads %3.0f MiB from offset 0 (%.0f MB/s)
                                         p50 %6.2f ms  p99 %6.2f ms
    p99 during / idle                    %.1fx   target <= 2x: %s
`, ms(idle[0]), ms(idle[1]), float64(total)/mib, readMBps, ms(during[0]), ms(during[1]), ratio, metStr(ratio <= 2))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// tailLatency runs a paced producer and a tailing consumer of "live" for
// d (with background running beside them, if set) and returns the p50 and
// p99 end-to-end latency.
func tailLatency(b *testing.B, brokers []string, d time.Duration, background func(context.Context)) [2]time.Duration {
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
	if background != nil {
		go background(ctx)
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
	if len(lat) == 0 {
		b.Fatal("no record delivered")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return [2]time.Duration{lat[len(lat)/2], lat[len(lat)*99/100]}
}
