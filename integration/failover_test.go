package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/checker"
)

// produceWrites counts the produce requests (key 0) a kgo client wrote
// completely to a socket: the number of attempts the server may have seen.
type produceWrites struct{ n atomic.Int64 }

func (w *produceWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		w.n.Add(1)
	}
}

// TestKillLeaderDuringProduce: several franz-go producers, each its own
// client (so its own connections), produce unique values with acks=all while
// the stream's leader is killed with SIGKILL and later restarted. Every
// produce is recorded in a checker history (invoke/complete, ok or unknown);
// after the run the whole stream is read from offset 0 (the final read).
// A tailing consumer follows the stream through the fault. Asserted: every
// producer was re-routed (acked writes after the kill), the three replicas
// end with the same log end, no acknowledged value is missing, nothing is
// duplicated, the tailing consumer read exactly the final log (contiguous
// offsets, same values), and checker.Check (porcupine linearizability,
// same-connection ordering, anomalies) passes.
//
// Duplicates. Without idempotence a client that re-sends a produce whose
// first attempt committed (response lost with the killed leader) writes the
// value twice — legitimate at-least-once behaviour, not a server bug (the
// idempotent producers of TestIdempotent* re-send freely and are written
// once). The producers here disable re-sends: idempotence off, RecordRetries(0), one request in flight, one record per request, so a
// record is written to a socket at most once, and the test checks that (a
// kgo write hook counts produce requests written; it must not exceed the
// produce calls). A value twice in the log is then a server bug; there is no
// allowance for duplicates. Failed produces are recorded as unknown (info):
// a NOT_LEADER, a timeout or a dead connection does not prove the write did
// not commit; the checker patches unknown writes the final read saw and drops
// the rest.
//
// Both profiles: on kafka-0.10 kgo produces MessageSet v1 (Produce v2) that
// VDL converts, and the final read gets it back down-converted.
func TestKillLeaderDuringProduce(t *testing.T) {
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			if testing.Short() && profile != "modern" {
				t.Skip("-short: modern profile only")
			}
			killDuringProduce(t, profile, false)
		})
	}
}

// TestKillAllDuringProduce: the same workload and checks, but every node is
// killed with SIGKILL at once, then all are restarted: acknowledged writes
// were fsynced by a majority, so none may be missing after the restart.
func TestKillAllDuringProduce(t *testing.T) {
	killDuringProduce(t, "modern", true)
}

// killDuringProduce runs the producers, kills the leader (all: every node),
// restarts what it killed, and checks the history (see
// TestKillLeaderDuringProduce).
func killDuringProduce(t *testing.T, profile string, all bool) {
	const stream = "k1"
	c := StartCluster(t, Options{Profile: profile, Streams: []string{stream}})
	leader := c.WaitLeader(stream, 20*time.Second)

	producers := 4
	phase := 1500 * time.Millisecond
	if testing.Short() {
		producers, phase = 3, 800*time.Millisecond
	}
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	rec := checker.NewRecorder(clock)

	// A tailing consumer follows the stream through the fault (kgo re-routes
	// its fetches too); at the end it must have read exactly the final log.
	tailer, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	require.NoError(t, err)
	defer tailer.Close()
	tailCtx, tailStop := context.WithCancel(context.Background())
	defer tailStop()
	var tailMu sync.Mutex
	var tailed []string
	var tailErr error
	tailDone := make(chan struct{})
	go func() {
		defer close(tailDone)
		for tailCtx.Err() == nil {
			fs := tailer.PollFetches(tailCtx)
			tailMu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if tailErr == nil && r.Offset != int64(len(tailed)) {
					tailErr = fmt.Errorf("tailing consumer: offset %d after %d records", r.Offset, len(tailed))
				}
				tailed = append(tailed, string(r.Value))
			})
			tailMu.Unlock()
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var killedAt atomic.Int64
	killedAt.Store(-1)
	type stats struct {
		calls, ok, info, okAfterKill int
		writes                       *produceWrites
	}
	st := make([]*stats, producers)
	for p := 0; p < producers; p++ {
		writes := &produceWrites{}
		st[p] = &stats{writes: writes}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
			kgo.RecordRetries(0), kgo.MaxProduceRequestsInflightPerBroker(1), kgo.ProducerLinger(0),
			kgo.RecordDeliveryTimeout(3*time.Second), kgo.ProduceRequestTimeout(2*time.Second),
			kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
			kgo.DialTimeout(time.Second), kgo.WithHooks(writes))
		require.NoError(t, err)
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := st[p]
			gen := 0
			for i := 0; ctx.Err() == nil; i++ {
				v := fmt.Sprintf("c%d-%d", p, i)
				// One record per request and one request at a time: the
				// client's connection order is its real-time order. A new
				// logical connection after each failure (kgo reconnects).
				h := rec.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: p, Conn: p*100000 + gen, Value: v})
				s.calls++
				r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
				if err == nil {
					h.ProduceOK(r.Offset)
					s.ok++
					if k := killedAt.Load(); k >= 0 && clock() > k {
						s.okAfterKill++
					}
					continue
				}
				h.Info(err.Error(), false)
				s.info++
				gen++
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}

	time.Sleep(phase)
	killedAt.Store(clock())
	var fault string
	if all {
		var wgk sync.WaitGroup
		for _, n := range c.Nodes {
			wgk.Add(1)
			go func() { defer wgk.Done(); c.Kill(n.ID) }()
		}
		wgk.Wait()
		time.Sleep(phase / 2)
		for _, n := range c.Nodes {
			c.Restart(n.ID)
		}
		newLeader := c.WaitLeader(stream, 20*time.Second)
		fault = "kill -9 of every node, all restarted"
		t.Logf("all nodes killed at %s and restarted, node %d leads after %s", time.Duration(killedAt.Load()), newLeader, time.Duration(clock()-killedAt.Load()))
		time.Sleep(phase)
	} else {
		c.Kill(leader)
		newLeader := c.WaitLeader(stream, 20*time.Second)
		require.NotEqual(t, leader, newLeader)
		t.Logf("leader %d killed at %s, node %d leads after %s", leader, time.Duration(killedAt.Load()), newLeader, time.Duration(clock()-killedAt.Load()))
		time.Sleep(phase)
		c.Restart(leader)
		fault = fmt.Sprintf("kill -9 of node %d (the leader), restarted", leader)
	}
	restartAt := clock()
	time.Sleep(phase)
	cancel()
	wg.Wait()
	faults := []checker.FaultWindow{{Start: killedAt.Load(), End: restartAt, Kind: "kill", Detail: fault}}

	var acked int
	for p, s := range st {
		t.Logf("producer %d: %d produces, %d ok (%d after the kill), %d unknown, %d produce requests written", p, s.calls, s.ok, s.okAfterKill, s.info, s.writes.n.Load())
		require.Greater(t, s.okAfterKill, 0, "producer %d was not re-routed to the new leader", p)
		require.LessOrEqual(t, s.writes.n.Load(), int64(s.calls), "producer %d re-sent a produce: duplicates would be legitimate", p)
		acked += s.ok
	}

	// Replication settles: every replica (the restarted one included) ends
	// at the same offset, which is the high watermark everywhere. (A produce
	// the clients gave up on at the stop may still commit after wg.Wait:
	// wait for the log end to stay put.)
	c.WaitLeader(stream, 20*time.Second)
	hwm := settledEnd(t, c, stream)

	// Final read of the whole stream, recorded as Final fetches.
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	defer cons.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	var next int64
	seen := map[string]int64{}
	for next < hwm {
		h := rec.Invoke(checker.Op{Kind: checker.KindFetch, Stream: stream, Client: 1000, Conn: 1000000, From: next, Final: true})
		fs := cons.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "final read stuck at %d of %d", next, hwm)
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("final read: %v", err) })
		var recs []checker.Record
		var fhwm int64 = -1
		fs.EachPartition(func(fp kgo.FetchTopicPartition) { fhwm = max(fhwm, fp.HighWatermark) })
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, next, r.Offset)
			v := string(r.Value)
			if prev, dup := seen[v]; dup {
				t.Errorf("value %q at offsets %d and %d (duplicate)", v, prev, r.Offset)
			}
			seen[v] = r.Offset
			recs = append(recs, checker.Record{Offset: r.Offset, Value: v})
			next++
		})
		h.FetchOK(recs, fhwm)
	}

	history := rec.History()
	var missing []string
	for _, op := range history {
		if op.Kind == checker.KindProduce && op.Outcome == checker.OutcomeOK {
			if off, ok := seen[op.Value]; !ok || off != op.Offset {
				missing = append(missing, fmt.Sprintf("%s@%d", op.Value, op.Offset))
			}
		}
	}
	require.Empty(t, missing, "acknowledged values missing from the final read (or at another offset)")

	// The tailing consumer caught up and read the same log.
	require.Eventually(t, func() bool {
		tailMu.Lock()
		defer tailMu.Unlock()
		return int64(len(tailed)) >= hwm || tailErr != nil
	}, 20*time.Second, 20*time.Millisecond, "tailing consumer did not catch up to %d", hwm)
	tailStop()
	<-tailDone
	require.NoError(t, tailErr)
	final := make([]string, hwm)
	for v, off := range seen {
		final[off] = v
	}
	require.Equal(t, final, tailed, "tailing consumer vs final read")
	t.Logf("%d produces acknowledged, log holds %d records (%d unknown writes landed)", acked, hwm, int(hwm)-acked)

	res := checker.Check(history, checker.Options{OutDir: t.TempDir(), Faults: faults, Timeout: 60 * time.Second})
	if !res.OK {
		t.Fatalf("checker:\n%s", res.Markdown())
	}
	for _, s := range res.Streams {
		t.Logf("checker: stream %s: %d ops, %d checked, porcupine %s in %.0f ms, patch %+v", s.Stream, s.Ops, s.Checked, s.Porcupine, s.PorcupineMillis, s.Patch)
	}
	require.Zero(t, res.Ordering.Count)
}

// settledEnd waits until every running node reports the same log end and
// high watermark for the stream, unchanged over 500 ms, and returns it.
func settledEnd(t testing.TB, c *Cluster, stream string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last, since := int64(-1), time.Now()
	var why string
	for time.Now().Before(deadline) {
		end := int64(-1)
		agree := true
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			s, err := c.StreamStatus(n.ID, stream)
			if err != nil {
				agree, why = false, err.Error()
				break
			}
			if s.EndOffset != s.HighWatermark || (end >= 0 && s.EndOffset != end) {
				agree = false
				why = fmt.Sprintf("node %d: end %d hwm %d (others %d)", n.ID, s.EndOffset, s.HighWatermark, end)
				break
			}
			end = s.EndOffset
		}
		switch {
		case !agree || end != last:
			last, since = end, time.Now()
			if agree {
				why = fmt.Sprintf("end moved to %d", end)
			}
		case time.Since(since) >= 500*time.Millisecond:
			return end
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("stream %s: replicas did not settle on one log end within 20s (%s)", stream, why)
	return 0
}
