package campaign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/checker"
)

// Campaign commands (real processes only; the simulator has its own
// nemesis and clients, so scripts using them live in jepsen-like/campaigns/,
// not in testcases/):
//
//	nemesis faults=kill,power-loss,partition,pause interval=2s seed=1
//	workload producers=4 [consumers=2] duration=20s [stream=s1]
//
// The workload's producers write unique values (each on its own client;
// a new one after an error, so that a connection's history stays its own)
// and its consumers read the stream from offset 0 as it grows, while the
// nemesis, every interval, undoes its last fault and injects the next,
// drawn from its faults by its seed: kill -9 a node (restarted at the
// next turn), cut the leader's power (the failpoint build; its restart
// must keep what it reported durable), cut a node off (the failpoint
// build's per-peer drops), or stop a node with SIGSTOP (SIGCONT at the
// next turn: a process stalled by the OS, a GC, a VM migration). At the
// end every fault is undone. Every produce and every consumer poll goes
// into the history that check hands to the checker.

// nemesis is the fault mix of the next workloads.
type nemesis struct {
	faults   []string
	interval time.Duration
	rng      *rand.Rand
}

var nemesisFaults = []string{"kill", "power-loss", "partition", "partition-oneway", "partition-dc", "pause", "disk-full", "slow-disk", "leader-transfer", "crash", "torn-write", "disk-error", "replace", "cs-kill", "cs-partition"}

// failpointFaults need the failpoint build.
var failpointFaults = []string{"power-loss", "slow-disk", "crash", "torn-write", "disk-error"}

// crashPoints are where the crash fault kills a server (failpoint
// return(true): SIGKILL to itself), one drawn per fault.
var crashPoints = []string{"storage/beforeWrite", "storage/afterWrite", "storage/beforeSync", "storage/afterSync",
	"raftnode/beforeSave", "raftnode/afterSave", "raftnode/beforeApply", "raftnode/afterApply", "kafka/afterCommitBeforeResponse"}

// nemesis faults=a,b interval=D seed=N
func (r *runner) setNemesis(cmd Command) (string, error) {
	faults := strings.Split(cmd.Keys["faults"], ",")
	for _, f := range faults {
		if !slices.Contains(nemesisFaults, f) {
			return "", fmt.Errorf("fault %q: want some of %s", f, strings.Join(nemesisFaults, ","))
		}
	}
	interval, err := time.ParseDuration(cmd.Keys["interval"])
	if err != nil || interval <= 0 {
		return "", fmt.Errorf("interval=%q: want a positive duration", cmd.Keys["interval"])
	}
	seed, err := strconv.ParseUint(cmd.Keys["seed"], 10, 64)
	if err != nil {
		return "", fmt.Errorf("seed=%q: want a number", cmd.Keys["seed"])
	}
	for _, f := range faults {
		if slices.Contains(failpointFaults, f) || (strings.HasPrefix(f, "partition") && r.net == nil) {
			if _, err := r.failpoints(r.c.Nodes[0].ID).List(); err != nil {
				return "", r.noFailpoints(f, err)
			}
		}
	}
	r.nemesis = &nemesis{faults: faults, interval: interval, rng: rand.New(rand.NewPCG(seed, seed))}
	return fmt.Sprintf("nemesis: %s every %v (seed %d)", strings.Join(faults, ", "), interval, seed), nil
}

// workload producers=N [consumers=M] [kcat-producers=K] [kcat-consumers=L] duration=D [stream=S]
func (r *runner) workload(cmd Command) (string, error) {
	producers, err := intKey(cmd, "producers", 4)
	if err != nil {
		return "", err
	}
	consumers, err := intKey(cmd, "consumers", 0)
	if err != nil {
		return "", err
	}
	kcatProducers, err := intKey(cmd, "kcat-producers", 0)
	if err != nil {
		return "", err
	}
	kcatConsumers, err := intKey(cmd, "kcat-consumers", 0)
	if err != nil {
		return "", err
	}
	var kcat string
	if kcatProducers+kcatConsumers > 0 {
		if kcat, err = kcatPath(); err != nil {
			return "", err
		}
	}
	d, err := time.ParseDuration(cmd.Keys["duration"])
	if err != nil || d <= 0 {
		return "", fmt.Errorf("duration=%q: want a positive duration", cmd.Keys["duration"])
	}
	if r.opts.Duration > 0 {
		d = r.opts.Duration // vdl-jepsen --duration, make gate DURATION=
	}
	stream := r.stream(cmd)
	// all-streams=1: the i-th client of each kind on stream i (mod the
	// streams; kcat's from the second), instead of all on stream=.
	on := func(i, from int) string {
		if cmd.Keys["all-streams"] != "1" {
			return stream
		}
		return r.streams[(i+from)%len(r.streams)]
	}
	if cmd.Keys["all-streams"] == "1" {
		stream = strings.Join(r.streams, ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var acked, unknown atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex // r.next, r.conns and r.acked
	for i := range producers {
		wg.Go(func() { r.produceLoop(ctx, on(i, 0), &mu, &acked, &unknown) })
	}
	var polled atomic.Int64
	for i := range consumers {
		wg.Go(func() { r.consumeLoop(ctx, on(i, 0), &mu, &polled) })
	}
	var kcatAcked, kcatUnknown, kcatPolled atomic.Int64
	for i := range kcatProducers {
		wg.Go(func() { r.kcatProduceLoop(ctx, kcat, on(i, 1), &mu, &kcatAcked, &kcatUnknown) })
	}
	for i := range kcatConsumers {
		wg.Go(func() { r.kcatConsumeLoop(ctx, kcat, on(i, 1), &mu, &kcatPolled) })
	}
	var log []string
	var found []error // what undoing the faults found (a node that lost what it had promised)
	if r.nemesis != nil {
		log, found = r.runNemesis(ctx)
	}
	wg.Wait()
	found = append(found, r.undoFaults())
	out := fmt.Sprintf("%s: %d producers for %v: %d acknowledged, %d unknown", stream, producers, d, acked.Load(), unknown.Load())
	if consumers > 0 {
		out += fmt.Sprintf("; %d consumers read %d records", consumers, polled.Load())
	}
	if kcatProducers > 0 {
		out += fmt.Sprintf("; %d kcat producers: %d acknowledged, %d unknown", kcatProducers, kcatAcked.Load(), kcatUnknown.Load())
	}
	if kcatConsumers > 0 {
		out += fmt.Sprintf("; %d kcat consumers read %d records", kcatConsumers, kcatPolled.Load())
	}
	if n := refusedForSpace(r.history.History()); n > 0 {
		out += fmt.Sprintf("; %d produces refused for lack of space (KAFKA_STORAGE_ERROR)", n)
	}
	if len(log) > 0 {
		out += "\nnemesis: " + strings.Join(log, "; ")
	}
	return out, errors.Join(found...)
}

// produceLoop writes unique values until ctx ends.
func (r *runner) produceLoop(ctx context.Context, stream string, mu *sync.Mutex, acked, unknown *atomic.Int64) {
	var cl *kgo.Client
	conn := 0
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for ctx.Err() == nil {
		if cl == nil {
			// No retries inside the client: a produce is sent once, so a
			// value stored twice is the server's doing (a plain producer:
			// the idempotent one may resend a batch it is unsure of, which
			// integration's TestIdempotent* cover); after an error a new
			// client carries on.
			c, err := kgo.NewClient(kgo.SeedBrokers(r.c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.RecordDeliveryTimeout(5*time.Second),
				kgo.DisableIdempotentWrite())
			if err != nil {
				return
			}
			cl = c
			mu.Lock()
			r.conns++
			conn = r.conns
			mu.Unlock()
			r.setClient(conn, clientFranz)
		}
		mu.Lock()
		r.next++
		v := fmt.Sprintf("%s-%d", stream, r.next)
		mu.Unlock()
		h := r.history.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: conn, Conn: conn, Value: v})
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rec, err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).First()
		cancel()
		if err != nil {
			h.Info(err.Error(), false)
			unknown.Add(1)
			cl.Close()
			cl = nil // a new connection: what follows is not this one's history
			time.Sleep(50 * time.Millisecond)
			continue
		}
		h.ProduceOK(rec.Offset)
		acked.Add(1)
		mu.Lock()
		r.acked[stream] = append(r.acked[stream], ack{v, rec.Offset})
		mu.Unlock()
	}
}

// consumeLoop reads the stream from offset 0 until ctx ends, an assign
// consumer of its own making: each poll is one Fetch request, sent to the
// leader the metadata names after the poll began, and is a fetch in the
// history (its own connection id), with the high watermark the response
// carried. (franz-go's consumer fetches ahead in the background: what a
// poll returns may have been read long before the poll, and its high
// watermark would look stale to the checker's real-time order.)
func (r *runner) consumeLoop(ctx context.Context, stream string, mu *sync.Mutex, polled *atomic.Int64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.KafkaAddrs()...), kgo.RequestRetries(0))
	if err != nil {
		return
	}
	defer cl.Close()
	var pos int64
	for ctx.Err() == nil {
		mu.Lock()
		r.conns++
		conn := r.conns
		mu.Unlock()
		r.setClient(conn, clientFranz)
		h := r.history.Invoke(checker.Op{Kind: checker.KindFetch, Stream: stream, Client: conn, Conn: conn, From: pos})
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		recs, hwm, code, err := fetchOnce(fctx, cl, stream, pos)
		cancel()
		switch {
		case err != nil:
			h.Info(err.Error(), false)
			time.Sleep(50 * time.Millisecond)
			continue
		case code != 0:
			h.Complete(checker.Completion{Outcome: checker.OutcomeInfo, Err: kerr.ErrorForCode(code).Error(), HighWatermark: -1, Responded: true})
			time.Sleep(50 * time.Millisecond)
			continue
		case len(recs) == 0:
			// An empty answer proves nothing about the stream but its high
			// watermark, which the fetch carries.
		}
		h.FetchOK(recs, hwm)
		if len(recs) > 0 {
			pos = recs[len(recs)-1].Offset + 1
			polled.Add(int64(len(recs)))
		}
	}
}

// fetchOnce sends one Fetch of stream from pos to its leader (as the
// metadata says now) and returns the records from pos on, the high
// watermark, and the partition's error code.
func fetchOnce(ctx context.Context, cl *kgo.Client, stream string, pos int64) ([]checker.Record, int64, int16, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(stream)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, -1, 0, err
	}
	if len(mresp.Topics) != 1 || len(mresp.Topics[0].Partitions) == 0 {
		return nil, -1, 0, fmt.Errorf("metadata of %s: no partition", stream)
	}
	mtop := mresp.Topics[0]
	if mtop.ErrorCode != 0 {
		return nil, -1, mtop.ErrorCode, nil
	}
	mp := mtop.Partitions[0]
	if mp.ErrorCode != 0 {
		return nil, -1, mp.ErrorCode, nil
	}
	if mp.Leader < 0 {
		return nil, -1, 0, fmt.Errorf("metadata of %s: no leader", stream)
	}
	freq := kmsg.NewPtrFetchRequest()
	freq.ReplicaID = -1
	freq.MaxWaitMillis = 500
	freq.MinBytes = 1
	freq.MaxBytes = 1 << 20
	freq.SessionEpoch = -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = stream, mtop.TopicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, pos, 1<<20
	fp.CurrentLeaderEpoch, fp.LogStartOffset = -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	resp, err := cl.Broker(int(mp.Leader)).Request(ctx, freq)
	if err != nil {
		return nil, -1, 0, err
	}
	fresp := resp.(*kmsg.FetchResponse)
	if fresp.ErrorCode != 0 {
		return nil, -1, fresp.ErrorCode, nil
	}
	if len(fresp.Topics) != 1 || len(fresp.Topics[0].Partitions) != 1 {
		return nil, -1, 0, fmt.Errorf("fetch of %s: %d topics in the response", stream, len(fresp.Topics))
	}
	rp := &fresp.Topics[0].Partitions[0]
	if rp.ErrorCode != 0 {
		return nil, -1, rp.ErrorCode, nil
	}
	got, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: pos, Topic: stream}, rp, kgo.DefaultDecompressor(), nil)
	if got.Err != nil {
		return nil, -1, 0, got.Err
	}
	var recs []checker.Record
	for _, rec := range got.Records {
		if rec.Offset >= pos {
			recs = append(recs, checker.Record{Offset: rec.Offset, Value: string(rec.Value)})
		}
	}
	return recs, rp.HighWatermark, 0, nil
}

// activeFault is what the nemesis did last, to undo it.
type activeFault struct {
	kind string
	node uint64
}

// runNemesis injects a fault every interval until ctx ends, undoing the
// previous one first; it returns what it did, and what undoing found.
func (r *runner) runNemesis(ctx context.Context) (log []string, found []error) {
	n := r.nemesis
	tick := time.NewTicker(n.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return log, found
		case <-tick.C:
		}
		if err := r.undoFaults(); err != nil {
			log = append(log, "undo: "+err.Error())
			if f := findings(err); f != nil {
				found = append(found, f)
			}
		}
		if ctx.Err() != nil {
			return log, found
		}
		kind := n.faults[n.rng.IntN(len(n.faults))]
		ids := r.runningIDs()
		if len(ids) < len(r.c.Nodes) {
			continue // one fault at a time: a majority stays up
		}
		victim := ids[n.rng.IntN(len(ids))]
		if kind == "power-loss" || kind == "disk-full" {
			// The leader: what it acknowledges rests on its own fsync too.
			victim = r.c.WaitLeader(r.streams[0], 10*time.Second)
		}
		if err := r.inject(kind, victim); err != nil {
			log = append(log, fmt.Sprintf("%s n%d: %v", kind, victim, err))
			if f := findings(err); kind == "disk-full" && f != nil {
				found = append(found, f) // the server's answer to a full disk
			}
			continue
		}
		if strings.HasPrefix(kind, "cs-") {
			log = append(log, fmt.Sprintf("%s %s", kind, csName(r.active[len(r.active)-1].node)))
			continue
		}
		log = append(log, fmt.Sprintf("%s n%d", kind, victim))
	}
}

func slowKey(id uint64) string { return fmt.Sprintf("slow:%d", id) }

// transferLeader asks the leader of the first stream to hand its
// leadership to to (a follower; the leader itself is no transfer): an
// instant fault, nothing to undo.
func (r *runner) transferLeader(to uint64) error {
	stream := r.streams[0]
	leader := r.c.WaitLeader(stream, 10*time.Second)
	if leader == to {
		for _, n := range r.c.Nodes {
			if n.ID != leader {
				to = n.ID
				break
			}
		}
	}
	n := r.c.Node(leader)
	resp, err := n.AdminClient.Post(fmt.Sprintf("%s/streams/%s/transfer-leader?to=%d", n.AdminBase, stream, to), "application/json", nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("transfer-leader n%d -> n%d: %s: %s", leader, to, resp.Status, strings.TrimSpace(string(body)))
	}
	key := fmt.Sprintf("transfer:%d", to)
	r.openFault(key, "leader-transfer", fmt.Sprintf("n%d->n%d", leader, to))
	r.closeFaults(key)
	return nil
}

// awaitUnsyncedWrites waits, with the victim's fsyncs stalled, until its
// log grew: a cut after a fixed pause found nothing unsynced whenever the
// producers were between clients (after the previous fault), and then
// proved nothing. It gives up after 3s (an idle stream has nothing to lose).
func (r *runner) awaitUnsyncedWrites(victim uint64) {
	time.Sleep(200 * time.Millisecond) // a sync begun before the stall ends
	end := func() int64 {
		st, err := r.c.StreamStatus(victim, r.streams[0])
		if err != nil {
			return -1
		}
		return st.EndOffset
	}
	start := end()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if e := end(); start >= 0 && e > start {
			return
		}
	}
}

func (r *runner) runningIDs() []uint64 {
	var ids []uint64
	for _, nd := range r.c.Nodes {
		if nd.Running() {
			ids = append(ids, nd.ID)
		}
	}
	return ids
}

func (r *runner) inject(kind string, victim uint64) error {
	switch kind {
	case "kill":
		r.c.Kill(victim)
		r.openFault(nodeKey(victim), kind, fmt.Sprintf("n%d", victim))
	case "slow-disk":
		// Every fsync of the victim takes 100 ms longer (a disk falling
		// behind) until the next turn.
		if err := r.failpoints(victim).Enable("storage/beforeSync", "sleep(100)"); err != nil {
			return r.noFailpoints("slow disks", err)
		}
		r.openFault(slowKey(victim), kind, fmt.Sprintf("n%d", victim))
	case "leader-transfer":
		return r.transferLeader(victim)
	case "replace":
		return r.replace(victim) // records its own activeFault (the victim may change)
	case "crash", "torn-write":
		// The victim kills itself at a failpoint on its write path: one
		// drawn from crashPoints, or halfway through a write (a torn
		// write; its restart must cut the torn tail).
		point := "storage/tornWrite"
		if kind == "crash" {
			point = crashPoints[r.nemesis.rng.IntN(len(crashPoints))]
		}
		if err := r.failpoints(victim).Enable(point, "return(true)"); err != nil {
			return r.noFailpoints("crashes", err)
		}
		n := r.c.Node(victim)
		if !waitUntil(5*time.Second, func() bool { return !n.Running() }) {
			_ = r.failpoints(victim).Disable(point)
			return fmt.Errorf("%s did not fire within 5s (no write reached it)", point)
		}
		_ = r.c.WaitExit(victim, time.Second) // its own SIGKILL: expected
		r.openFault(nodeKey(victim), kind, fmt.Sprintf("n%d at %s", victim, point))
	case "disk-error":
		// The victim's next fsync fails (EIO): its log is unusable, it
		// must stop taking writes (/health 503) rather than acknowledge
		// what is not durable; a restart recovers it.
		if err := r.failpoints(victim).Enable("storage/beforeSync", `return("eio")`); err != nil {
			return r.noFailpoints("disk errors", err)
		}
		if !waitUntil(5*time.Second, func() bool { return r.c.Health(victim) == http.StatusServiceUnavailable || !r.c.Node(victim).Running() }) {
			_ = r.failpoints(victim).Disable("storage/beforeSync")
			return fmt.Errorf("n%d: no fsync failed within 5s (no write reached it)", victim)
		}
		r.openFault(nodeKey(victim), kind, fmt.Sprintf("n%d", victim))
	case "power-loss":
		// The victim's fsyncs stall first (a disk that falls behind), so
		// the cut finds written, unsynced data: correct code has promised
		// none of it, code that acknowledges or votes before its fsync has.
		// The stall outlasts awaitUnsyncedWrites, so the cut lands inside
		// it: a stall as long as the wait ended as the cut came, and the
		// gate missed the ack-before-fsync canary in 1 of 38 local runs.
		if err := r.failpoints(victim).Enable("storage/beforeSync", "sleep(5000)"); err != nil {
			return r.noFailpoints("power losses", err)
		}
		r.awaitUnsyncedWrites(victim)
		r.c.PowerLoss(victim)
		r.powered[victim] = true
		r.openFault(nodeKey(victim), kind, fmt.Sprintf("n%d", victim))
	case "pause":
		r.c.Pause(victim)
		r.openFault(nodeKey(victim), kind, fmt.Sprintf("n%d", victim))
	case "disk-full":
		return r.fillDisk(victim)
	case "cs-kill", "cs-partition":
		return r.injectCS(kind)
	case "partition", "partition-oneway", "partition-dc":
		var side, others []uint64
		for _, nd := range r.c.Nodes {
			if nd.ID == victim || (kind == "partition-dc" && r.dcOf(nd.ID) == r.dcOf(victim)) {
				side = append(side, nd.ID)
			} else {
				others = append(others, nd.ID)
			}
		}
		if kind == "partition-dc" && r.net != nil { // the DC's config server goes with it
			in, out := r.dcConfigServers(r.dcOf(victim))
			side, others = append(side, in...), append(others, out...)
		}
		if len(others) == 0 {
			return errors.New("one DC: nothing to cut it from")
		}
		if err := r.cut(cutPairs(side, others, kind != "partition-oneway")); err != nil {
			return err
		}
		sep := "|"
		if kind == "partition-oneway" {
			sep = ">"
		}
		r.openFault("partition", kind, names(side)+sep+names(others))
	}
	r.active = append(r.active, activeFault{kind, victim})
	return nil
}

// undoFaults heals partitions and restarts the nodes the nemesis stopped;
// a node that lost power must have kept what it reported durable.
func (r *runner) undoFaults() error {
	var errs []error
	for _, f := range r.active {
		switch f.kind {
		case "cs-kill":
			errs = append(errs, r.undoCS(f))
		case "partition", "partition-oneway", "partition-dc", "cs-partition":
			if _, err := r.heal(); err != nil {
				errs = append(errs, err)
			}
		case "disk-error":
			n := r.c.Node(f.node)
			if n.Running() {
				r.c.Kill(f.node)
			} else {
				_ = r.c.WaitExit(f.node, time.Second) // it stopped by itself on the failed write
			}
			fallthrough
		case "kill", "power-loss", "crash", "torn-write":
			if _, err := r.restart(Command{Name: "restart", Args: []string{strconv.FormatUint(f.node, 10)}}); err != nil {
				errs = append(errs, err)
			}
		case "pause":
			r.c.Resume(f.node)
			r.closeFaults(nodeKey(f.node))
		case "disk-full":
			if err := r.freeDisk(f.node); err != nil {
				errs = append(errs, err)
			}
		case "replace":
			if err := r.promote(f.node); err != nil {
				errs = append(errs, err)
			}
		case "slow-disk":
			if r.c.Node(f.node).Running() {
				if err := r.failpoints(f.node).Disable("storage/beforeSync"); err != nil {
					errs = append(errs, err)
				}
			}
			r.closeFaults(slowKey(f.node))
		}
	}
	r.active = nil
	return errors.Join(errs...)
}
