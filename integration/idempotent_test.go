package integration

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// Idempotent producers of real clients through leader kills: each client
// produces unique values with its idempotent producer and retries on, while
// the stream's leader is killed with SIGKILL and restarted several times.
// Every value a client sends is recorded in a checker history (ok with the
// acknowledged offset, or unknown); after the run the whole stream is read
// back (the final read). Asserted: the producers were re-routed, nothing is
// duplicated (the retries of batches whose first attempt committed with the
// killed leader are answered with their original offsets), no
// acknowledged value is missing or at another offset, acknowledged offsets
// increase in send order per producer (idempotence keeps order), and
// checker.Check (linearizability, ordering, anomalies) passes.
//
// Unlike TestKillLeaderDuringProduce there is no allowance to make: the
// clients re-send freely (several requests in flight, unlimited retries).

// idemProducer is one client's idempotent producer: send calls done once
// per value, with the offset it got or an error.
type idemProducer interface {
	send(value string, done func(offset int64, err error))
	// close flushes (waiting at most until ctx ends) and closes.
	close(ctx context.Context)
}

// idemConfig is one run of idemRun.
type idemConfig struct {
	name   string // value prefix
	n      int    // producers
	mk     func(t *testing.T, c *Cluster, stream string, p int) idemProducer
	kills  int    // leader kills (default 3, 2 with -short)
	canary string // run the canary build with this canary on
	// inflight bounds the values sent and not yet answered per producer
	// (default 64).
	inflight int
}

// idemOutcome is what idemRun found.
type idemOutcome struct {
	dups, missing []string
	res           *checker.Result
}

// ok reports whether every check passed.
func (o idemOutcome) ok() bool { return len(o.dups) == 0 && len(o.missing) == 0 && o.res.OK }

// require fails the test unless every check passed.
func (o idemOutcome) require(t *testing.T) {
	t.Helper()
	require.Empty(t, o.dups, "duplicates in the final log")
	require.Empty(t, o.missing, "acknowledged values missing from the final read (or at another offset)")
	if !o.res.OK {
		t.Fatalf("checker:\n%s", o.res.Markdown())
	}
	for _, s := range o.res.Streams {
		require.Empty(t, s.Anomalies, "stream %s", s.Stream)
	}
}

// idemRun runs cfg.n producers made by cfg.mk against a 3-node cluster
// while the stream's leader is killed and restarted, then checks.
func idemRun(t *testing.T, cfg idemConfig) idemOutcome {
	const stream = "idem"
	name, n, mk := cfg.name, cfg.n, cfg.mk
	opts := Options{Streams: []string{stream}}
	var c *Cluster
	if cfg.canary != "" {
		opts.Env = []string{"VDL_CANARY=" + cfg.canary}
		c = proccluster.Start(t, proccluster.Canary.Path(t), opts)
	} else {
		c = StartCluster(t, opts)
	}
	c.WaitLeader(stream, 20*time.Second)
	kills, phase := 3, 1500*time.Millisecond
	if testing.Short() {
		kills, phase = 2, time.Second
	}
	if cfg.kills > 0 {
		kills = cfg.kills
	}
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	rec := checker.NewRecorder(clock)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var killedAt atomic.Int64
	killedAt.Store(-1)
	type stats struct{ sent, ok, info, okAfterKill atomic.Int64 }
	st := make([]*stats, n)
	prods := make([]idemProducer, n)
	for p := range n {
		st[p] = &stats{}
		prods[p] = mk(t, c, stream, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := st[p]
			inflight := make(chan struct{}, cmp.Or(cfg.inflight, 64)) // requests pipeline; bounded so the history stays checkable
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case inflight <- struct{}{}:
				case <-ctx.Done():
					return
				}
				v := fmt.Sprintf("%s%d-%d", name, p, i)
				// One logical connection per producer: its acknowledged
				// offsets must increase in send order.
				h := rec.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: p, Conn: p + 1, Value: v})
				s.sent.Add(1)
				prods[p].send(v, func(off int64, err error) {
					<-inflight
					if err != nil {
						h.Info(err.Error(), false)
						s.info.Add(1)
						return
					}
					h.ProduceOK(off)
					s.ok.Add(1)
					if k := killedAt.Load(); k >= 0 && clock() > k {
						s.okAfterKill.Add(1)
					}
				})
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}

	var faults []checker.FaultWindow
	time.Sleep(phase)
	// Every producer acknowledged before the first kill: a client slow to
	// start (kafkajs's Node.js process under a loaded CI machine) otherwise
	// first met the leader when it was already killed, and its process
	// gave up on the refused connection: nothing it sent was acknowledged.
	require.Eventually(t, func() bool {
		for _, s := range st {
			if s.ok.Load() == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every producer's first acknowledgement")
	for k := range kills {
		leader := c.WaitLeader(stream, 20*time.Second)
		at := clock()
		if k == 0 {
			killedAt.Store(at)
		}
		c.Kill(leader)
		newLeader := c.WaitLeader(stream, 20*time.Second)
		t.Logf("kill %d: leader %d killed at %s, node %d leads after %s", k+1, leader, time.Duration(at), newLeader, time.Duration(clock()-at))
		time.Sleep(phase)
		c.Restart(leader)
		faults = append(faults, checker.FaultWindow{Start: at, End: clock(), Kind: "kill", Detail: fmt.Sprintf("kill -9 of node %d (the leader), restarted", leader)})
		time.Sleep(phase)
	}
	cancel()
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer fcancel()
	for _, pr := range prods {
		pr.close(fctx)
	}

	var acked int64
	for p, s := range st {
		t.Logf("producer %d: %d sent, %d ok (%d after the first kill), %d unknown", p, s.sent.Load(), s.ok.Load(), s.okAfterKill.Load(), s.info.Load())
		require.Greater(t, s.okAfterKill.Load(), int64(0), "producer %d was not re-routed to the new leader", p)
		acked += s.ok.Load()
	}

	c.WaitLeader(stream, 20*time.Second)
	hwm := settledEnd(t, c, stream)
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	defer cons.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	var next int64
	seen := map[string]int64{}
	var dups []string
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
				dups = append(dups, fmt.Sprintf("%q at %d and %d", v, prev, r.Offset))
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
	t.Logf("%d values acknowledged, the log holds %d (%d unknown writes landed, %d values twice)", acked, hwm, hwm-acked, len(dups))

	res := checker.Check(history, checker.Options{OutDir: t.TempDir(), Faults: faults, Timeout: 2 * time.Minute})
	for _, s := range res.Streams {
		t.Logf("checker: stream %s: %d ops, %d checked, porcupine %s in %.0f ms, patch %+v, failures %v", s.Stream, s.Ops, s.Checked, s.Porcupine, s.PorcupineMillis, s.Patch, s.Failures)
	}
	return idemOutcome{dups: dups, missing: missing, res: res}
}

// TestIdempotentFranzGo: franz-go's default producer (idempotent, five
// requests in flight per broker, unlimited retries).
func TestIdempotentFranzGo(t *testing.T) {
	idemRun(t, idemConfig{name: "kgo", n: 3, mk: newKgoProducer}).require(t)
}

func newKgoProducer(t *testing.T, c *Cluster, stream string, _ int) idemProducer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.DialTimeout(time.Second), kgo.ProduceRequestTimeout(3*time.Second))
	require.NoError(t, err)
	return kgoProducer{cl}
}

// TestIdempotentCanaryDedupOff: the same run on servers whose leaders
// append retries again (canary dedup-off) must be caught: the test can
// fail. Retries whose first attempt committed are the kills' doing, so a
// run may see none (this loaded machine once saw none in three): up to
// six runs.
func TestIdempotentCanaryDedupOff(t *testing.T) {
	for run := 1; ; run++ {
		o := idemRun(t, idemConfig{name: "kgo", n: 3, mk: newKgoProducer, canary: "dedup-off", kills: 4})
		if !o.ok() {
			t.Logf("run %d caught the canary: %d duplicates, checker failures %v", run, len(o.dups), o.res.Streams[0].Failures)
			require.NotEmpty(t, o.dups)
			return
		}
		require.Less(t, run, 6, "the dedup-off canary was not caught in %d runs", run)
	}
}

type kgoProducer struct{ cl *kgo.Client }

func (k kgoProducer) send(v string, done func(int64, error)) {
	k.cl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) { done(r.Offset, err) })
}

func (k kgoProducer) close(ctx context.Context) {
	_ = k.cl.Flush(ctx)
	k.cl.Close()
}

// TestIdempotentSarama: sarama's AsyncProducer with Producer.Idempotent
// (which needs Net.MaxOpenRequests = 1 and acks=all) and retries on.
func TestIdempotentSarama(t *testing.T) {
	idemRun(t, idemConfig{name: "sarama", n: 2, mk: func(t *testing.T, c *Cluster, stream string, _ int) idemProducer {
		cfg := saramaConfig(sarama.V2_7_0_0)
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.Retry.Max = 1000
		cfg.Producer.Retry.Backoff = 100 * time.Millisecond
		cfg.Producer.Return.Errors = true
		cfg.Producer.Timeout = 3 * time.Second
		cfg.Producer.Flush.Frequency = 2 * time.Millisecond
		cfg.Net.DialTimeout = time.Second
		cfg.Net.ReadTimeout = 5 * time.Second
		cfg.Metadata.Retry.Max = 100
		cfg.Producer.Transaction.Retry.Max = 100
		ap, err := sarama.NewAsyncProducer(c.KafkaAddrs(), cfg)
		require.NoError(t, err)
		sp := &saramaProducer{ap: ap, done: make(chan struct{})}
		go sp.loop()
		return sp
	}}).require(t)
}

type saramaProducer struct {
	ap   sarama.AsyncProducer
	done chan struct{}
}

func (s *saramaProducer) loop() {
	defer close(s.done)
	succ, errs := s.ap.Successes(), s.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			m.Metadata.(func(int64, error))(m.Offset, nil)
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			e.Msg.Metadata.(func(int64, error))(-1, e.Err)
		}
	}
}

func (s *saramaProducer) send(v string, done func(int64, error)) {
	s.ap.Input() <- &sarama.ProducerMessage{Topic: "idem", Value: sarama.StringEncoder(v), Metadata: done}
}

func (s *saramaProducer) close(ctx context.Context) {
	s.ap.AsyncClose() // flushes, then closes Successes and Errors
	select {
	case <-s.done:
	case <-ctx.Done():
	}
}

// TestIdempotentKcat: librdkafka (kcat) with enable.idempotence=true: the
// values go to kcat's stdin as they are made; its delivery reports (one
// per message, in order: -v -v -v) give each value's offset.
func TestIdempotentKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat; .ci/run installs it)")
	}
	// kcat serves its delivery reports only when it reads the next line:
	// values are not held back waiting for them.
	idemRun(t, idemConfig{name: "kcat", n: 2, inflight: 1 << 20, mk: func(t *testing.T, c *Cluster, stream string, _ int) idemProducer {
		cmd := exec.Command(kcat, "-b", strings.Join(c.KafkaAddrs(), ","), "-P", "-t", stream, "-p", "0",
			"-X", "enable.idempotence=true", "-X", "topic.produce.offset.report=true",
			"-X", "message.timeout.ms=120000", "-X", "linger.ms=2", "-X", "retry.backoff.ms=50",
			"-X", "socket.connection.setup.timeout.ms=1000", "-X", "topic.metadata.refresh.interval.ms=500",
			"-v", "-v", "-v")
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		errPipe, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		k := &kcatProducer{cmd: cmd, in: in, reports: make(chan kcatReport, 1<<16), done: make(chan struct{})}
		go k.read(errPipe)
		go k.deliver()
		return k
	}}).require(t)
}

type kcatReport struct {
	offset int64
	err    error
}

type kcatProducer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	mu      sync.Mutex
	waiting []func(int64, error) // in send order: librdkafka reports in that order
	reports chan kcatReport
	done    chan struct{}
	stderr  []string // lines that are not delivery reports (the last few)
}

var (
	kcatDelivered = regexp.MustCompile(`Message delivered to partition 0 \(offset (-?\d+)\)`)
	kcatFailed    = regexp.MustCompile(`Delivery failed for message: (.*)`)
)

func (k *kcatProducer) read(r io.Reader) {
	defer close(k.reports)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := kcatDelivered.FindStringSubmatch(line); m != nil {
			off, _ := strconv.ParseInt(m[1], 10, 64)
			k.reports <- kcatReport{offset: off}
		} else if m := kcatFailed.FindStringSubmatch(line); m != nil {
			k.reports <- kcatReport{offset: -1, err: fmt.Errorf("kcat: %s", m[1])}
		} else {
			k.mu.Lock()
			k.stderr = append(k.stderr[max(0, len(k.stderr)-20):], line)
			k.mu.Unlock()
		}
	}
}

func (k *kcatProducer) deliver() {
	defer close(k.done)
	for rep := range k.reports {
		k.mu.Lock()
		if len(k.waiting) == 0 {
			k.mu.Unlock()
			continue
		}
		done := k.waiting[0]
		k.waiting = k.waiting[1:]
		k.mu.Unlock()
		done(rep.offset, rep.err)
	}
	k.mu.Lock()
	rest := k.waiting
	k.waiting = nil
	k.mu.Unlock()
	for _, done := range rest {
		done(-1, fmt.Errorf("kcat exited without a delivery report"))
	}
}

func (k *kcatProducer) send(v string, done func(int64, error)) {
	k.mu.Lock()
	k.waiting = append(k.waiting, done)
	k.mu.Unlock()
	// A failed write (kcat died) is reported when its reports end.
	_, _ = io.WriteString(k.in, v+"\n")
}

func (k *kcatProducer) close(ctx context.Context) {
	_ = k.in.Close()
	select {
	case <-k.done:
	case <-ctx.Done():
		_ = k.cmd.Process.Kill()
		<-k.done
	}
	_ = k.cmd.Wait()
}

// TestInitProducerIDOnEveryBroker: every broker answers InitProducerId,
// the offsets stream's leader from its own blocks, the others through it
// (the peers' HTTP); no two answers share an id, also after the leader of
// the offsets stream was killed and another took over.
func TestInitProducerIDOnEveryBroker(t *testing.T) {
	c := StartCluster(t, Options{})
	const offsets = "__consumer_offsets"
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	seen := map[int64]uint64{}
	ask := func(node uint64) int64 {
		t.Helper()
		var last error
		for range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req := kmsg.NewPtrInitProducerIDRequest()
			req.ProducerID, req.ProducerEpoch = -1, -1
			resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
			cancel()
			if err == nil && resp.ErrorCode == 0 {
				require.Equal(t, int16(0), resp.ProducerEpoch)
				prev, dup := seen[resp.ProducerID]
				require.False(t, dup, "producer id %d from node %d and node %d", resp.ProducerID, node, prev)
				seen[resp.ProducerID] = node
				return resp.ProducerID
			}
			last = err
			if err == nil {
				last = kerr.ErrorForCode(resp.ErrorCode)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("node %d gave no producer id: %v", node, last)
		return 0
	}
	leader := c.WaitLeader(offsets, 20*time.Second)
	for _, n := range c.Nodes {
		a, b := ask(n.ID), ask(n.ID)
		require.Equal(t, a+1, b, "node %d hands out its block in order", n.ID)
	}
	c.Kill(leader)
	newLeader := c.WaitLeader(offsets, 20*time.Second)
	require.NotEqual(t, leader, newLeader)
	for _, n := range c.Nodes {
		if n.ID != leader {
			ask(n.ID)
			ask(n.ID)
		}
	}
	c.Restart(leader)
	ask(leader)
	t.Logf("%d distinct producer ids from 3 brokers through a leader change", len(seen))
}
