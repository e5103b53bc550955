package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/checker"
)

// finalRead records values read from offset 0 as the history's final read.
func finalRead(rec *checker.Recorder, stream string, conn int, vals []string) {
	h := rec.Invoke(checker.Op{Kind: checker.KindFetch, Stream: stream, Client: conn, Conn: conn, Final: true})
	recs := make([]checker.Record, len(vals))
	for i, v := range vals {
		recs[i] = checker.Record{Offset: int64(i), Value: v}
	}
	h.FetchOK(recs, int64(len(vals)))
}

// TestSaramaPipelinedOrdering: same-connection ordering with pipelined
// produce requests from sarama.
//
// sarama 1.61's AsyncProducer never has two produce requests in flight for
// one partition (its partitionMuter, "mirroring Kafka's RecordAccumulator"),
// whatever Net.MaxOpenRequests says; a VDL stream is one partition. So:
//
//   - one-stream: sarama's Broker.AsyncProduce (the call the AsyncProducer
//     itself uses) on ONE connection with Net.MaxOpenRequests = 8 sends M
//     one-message produce requests back to back; the acked offsets must
//     increase in send order (and be 0..M-1), responses must come back in
//     request order, and the history must pass checker.Check.
//   - async-producer: an AsyncProducer (Net.MaxOpenRequests = 8, one message
//     per request, no retries) spreads values over several streams led by
//     the same node, so its requests pipeline on its one connection to that
//     node (peak in flight > 1); per stream, offsets increase in send order;
//     checker.Check passes (each stream recorded as its own logical
//     connection: the wire order across partitions is sarama's choice).
func TestSaramaPipelinedOrdering(t *testing.T) {
	streams := []string{"o1", "o2", "o3", "o4", "o5"}
	// No retries here (a retry could reorder), so a leader change would fail
	// the test: 100 ms ticks (elections after 1-2 s) keep a loaded machine's
	// scheduling stalls from causing one.
	c := StartCluster(t, Options{Streams: streams, TickMillis: 100})
	m := scale(2000)

	t.Run("one-stream", func(t *testing.T) {
		stream := streams[0]
		leader := c.WaitLeader(stream, 20*time.Second)
		cfg := saramaConfig(sarama.V2_1_0_0)
		cfg.Net.MaxOpenRequests = 8
		b := sarama.NewBroker(c.Node(leader).Kafka)
		require.NoError(t, b.Open(cfg))
		defer b.Close()
		ok, err := b.Connected()
		require.NoError(t, err)
		require.True(t, ok)

		rec := checker.NewRecorder(nil)
		var inFlight, peak atomic.Int64
		var mu sync.Mutex
		var order []int // request index per response, in arrival order
		offsets := make([]int64, m)
		errs := make([]error, m)
		var wg sync.WaitGroup
		for i := 0; i < m; i++ {
			v := fmt.Sprintf("p-%d", i)
			req := &sarama.ProduceRequest{RequiredAcks: sarama.WaitForAll, Timeout: 10000, Version: 7}
			now := time.Now()
			req.AddBatch(stream, 0, &sarama.RecordBatch{Version: 2, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
				FirstTimestamp: now, MaxTimestamp: now, Records: []*sarama.Record{{Value: []byte(v)}}})
			h := rec.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: 1, Conn: 1, Seq: int64(i + 1), Value: v})
			wg.Add(1)
			peak.Store(max(peak.Load(), inFlight.Add(1)))
			err := b.AsyncProduce(req, func(resp *sarama.ProduceResponse, err error) {
				defer wg.Done()
				inFlight.Add(-1)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if err == nil {
					blk := resp.GetBlock(stream, 0)
					if blk == nil {
						err = fmt.Errorf("no block in response")
					} else if blk.Err != sarama.ErrNoError {
						err = blk.Err
					} else {
						offsets[i] = blk.Offset
					}
				}
				errs[i] = err
				if err != nil {
					h.Info(err.Error(), true)
				} else {
					h.ProduceOK(offsets[i])
				}
			})
			require.NoError(t, err)
		}
		wg.Wait()
		t.Logf("peak produce requests in flight on the connection: %d", peak.Load())
		require.Greater(t, peak.Load(), int64(1), "no pipelining happened")
		for i := 0; i < m; i++ {
			require.NoError(t, errs[i], "request %d", i)
			require.Equal(t, int64(i), offsets[i], "request %d acked at offset %d", i, offsets[i])
			require.Equal(t, i, order[i], "response #%d answered request %d", i, order[i])
		}
		got := kgoConsume(t, c.KafkaAddrs(), stream, 0, m)
		require.Equal(t, values(m, "p-"), got)
		finalRead(rec, stream, 2, got)
		res := checker.Check(rec.History(), checker.Options{OutDir: t.TempDir(), Timeout: 30 * time.Second})
		require.True(t, res.OK, "checker:\n%s", res.Markdown())
	})

	t.Run("async-producer", func(t *testing.T) {
		// Streams led by the node that leads the most of them.
		by := map[uint64][]string{}
		for _, s := range streams[1:] {
			l := c.WaitLeader(s, 20*time.Second)
			by[l] = append(by[l], s)
		}
		var group []string
		for _, ss := range by {
			if len(ss) > len(group) {
				group = ss
			}
		}
		if len(group) < 2 {
			t.Skipf("no node leads two of %v (leaders %v): cannot pipeline one partition's worth with sarama", streams[1:], by)
		}
		cfg := saramaConfig(sarama.V2_1_0_0)
		cfg.Net.MaxOpenRequests = 8
		cfg.Producer.Flush.MaxMessages = 1
		cfg.Producer.Retry.Max = 0
		// A client whose connection to the leader is up before the run:
		// with no retries, a connection sarama found broken at the first
		// request failed every message with "broker not connected" and
		// nothing sent (CI, twice), which says nothing about ordering.
		var ap sarama.AsyncProducer
		for try := 0; ap == nil; try++ {
			cl, err := sarama.NewClient(c.KafkaAddrs(), cfg)
			require.NoError(t, err)
			ready := true
			for _, s := range group {
				b, err := cl.Leader(s, 0)
				if err != nil {
					ready = false
					continue
				}
				ok, err := b.Connected()
				ready = ready && ok && err == nil
			}
			if !ready {
				_ = cl.Close()
				require.Less(t, try, 10, "no client connected to the leader of %v", group)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			ap, err = sarama.NewAsyncProducerFromClient(cl)
			require.NoError(t, err)
			defer cl.Close()
		}
		defer ap.Close()
		rec := checker.NewRecorder(nil)
		handles := make([]*checker.Handle, m)
		var peak int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if ctr, ok := cfg.MetricRegistry.Get("requests-in-flight").(interface{ Count() int64 }); ok {
					peak = max(peak, ctr.Count())
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}()
		value := func(i int) string { return fmt.Sprintf("a-%s-%d", group[i%len(group)], i) }
		go func() {
			for i := 0; i < m; i++ {
				k := i % len(group)
				// The AsyncProducer sends one partition's messages in input
				// order, but which partition's request goes on the wire next
				// is its choice (the muter holds a partition back while its
				// request is in flight); so each stream is recorded as its own
				// logical connection with Seq = its input order.
				handles[i] = rec.Invoke(checker.Op{Kind: checker.KindProduce, Stream: group[k], Client: 1, Conn: 1 + k, Value: value(i)})
				ap.Input() <- &sarama.ProducerMessage{Topic: group[k], Value: sarama.StringEncoder(value(i)), Metadata: i}
			}
		}()
		last := map[string]int64{}
		for n := 0; n < m; n++ {
			select {
			case msg := <-ap.Successes():
				i := msg.Metadata.(int)
				handles[i].ProduceOK(msg.Offset)
				if p, ok := last[msg.Topic]; ok {
					require.Greater(t, msg.Offset, p, "stream %s: message %d", msg.Topic, i)
				}
				last[msg.Topic] = msg.Offset
			case err := <-ap.Errors():
				// sarama abandons the connection on the first failed
				// partition and fails what follows with "broker not
				// connected": report every error, the cause among them.
				all := []string{err.Error()}
				for drain := time.After(500 * time.Millisecond); ; {
					select {
					case e := <-ap.Errors():
						all = append(all, e.Error())
						continue
					case <-drain:
					}
					break
				}
				t.Fatalf("produce failed after %d acks: %v", n, all)
			case <-time.After(30 * time.Second):
				t.Fatalf("timed out after %d acks", n)
			}
		}
		close(stop)
		<-sampled
		t.Logf("streams %v led by one node; peak requests in flight: %d", group, peak)
		require.Greater(t, peak, int64(1), "no pipelining happened")
		for k, s := range group {
			var want []string
			for i := k; i < m; i += len(group) {
				want = append(want, value(i))
			}
			got := kgoConsume(t, c.KafkaAddrs(), s, 0, len(want))
			require.Equal(t, want, got, "stream %s", s)
			finalRead(rec, s, 100+k, got)
		}
		res := checker.Check(rec.History(), checker.Options{OutDir: t.TempDir(), Timeout: 30 * time.Second})
		require.True(t, res.OK, "checker:\n%s", res.Markdown())
	})
}
