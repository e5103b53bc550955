package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkStreams' hot load runs in a process of its own: this test
// binary again, with loadEnv set (TestMain). Its clients used to share the
// benchmark's process with the three servers, so their garbage (a consumer
// decoding 1.2 million records a second) started collections that marked
// all three servers' idle state, a cost no server pays from its clients in
// production. Now the servers' process collects for the servers alone.

const loadEnv = "VDL_BENCH_LOAD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(loadEnv); spec != "" {
		os.Exit(loadProcess(spec))
	}
	os.Exit(m.Run())
}

// loadSpec is what a load process does: produce 1 KiB records to Topics
// for Seconds with one franz-go client on its default options, then read
// the last hotConsumeRecords of each topic hotConsumeRounds times.
type loadSpec struct {
	Brokers []string
	Topics  []string
	Seconds float64
}

// loadResult is what it did: records acknowledged and read, and in how
// long (the reads from each consumer's first records).
type loadResult struct {
	Acked, Read              int64
	ProduceSecs, ConsumeSecs float64
}

// runLoad runs spec in a load process and returns its result.
func runLoad(ctx context.Context, spec loadSpec) (loadResult, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return loadResult{}, err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadEnv+"="+string(js))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return loadResult{}, fmt.Errorf("load process: %w", err)
	}
	var r loadResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return loadResult{}, fmt.Errorf("load process answered %q: %w", out.String(), err)
	}
	return r, nil
}

// loadProcess is a load process's main: the result on stdout as JSON.
func loadProcess(js string) int {
	var spec loadSpec
	err := json.Unmarshal([]byte(js), &spec)
	var r loadResult
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(spec.Seconds*float64(time.Second))+5*time.Minute)
		defer cancel()
		r, err = spec.run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load process:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

func (s loadSpec) run(ctx context.Context) (loadResult, error) {
	const size = 1024
	var r loadResult
	starts, err := s.ends(ctx)
	if err != nil {
		return r, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		return r, err
	}
	defer cl.Close()
	// Values that do not compress (franz-go compresses batches by
	// default): slices of a random buffer at random offsets.
	random := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	stop := start.Add(time.Duration(s.Seconds * float64(time.Second)))
	for i := 0; time.Now().Before(stop); i++ {
		off := rng.IntN(len(random) - size)
		cl.Produce(ctx, &kgo.Record{Topic: s.Topics[i%len(s.Topics)], Value: random[off : off+size]}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			acked.Add(1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return r, err
	}
	r.Acked, r.ProduceSecs = acked.Load(), time.Since(start).Seconds()
	if n := failed.Load(); n > 0 {
		return r, fmt.Errorf("%d produces failed (first: %v)", n, firstErr.Load())
	}

	// The last hotConsumeRecords this load wrote to each stream.
	ends, err := s.ends(ctx)
	if err != nil {
		return r, err
	}
	from := map[string]map[int32]kgo.Offset{}
	var total int64
	for _, t := range s.Topics {
		at := max(starts[t], ends[t]-hotConsumeRecords)
		from[t] = map[int32]kgo.Offset{0: kgo.NewOffset().At(at)}
		total += ends[t] - at
	}
	for range hotConsumeRounds {
		n, d, err := s.consume(ctx, from, total)
		if err != nil {
			return r, err
		}
		r.Read, r.ConsumeSecs = r.Read+n, r.ConsumeSecs+d.Seconds()
	}
	return r, nil
}

// ends are the topics' end offsets. The balancer may be moving a hot
// leader right now: it asks again until every stream answers.
func (s loadSpec) ends(ctx context.Context) (map[string]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	for _, t := range s.Topics {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	ends := map[string]int64{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, sh := range cl.RequestSharded(ctx, req) {
			if sh.Err != nil {
				continue
			}
			for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode == 0 {
						ends[t.Topic] = p.Offset
					}
				}
			}
		}
		if len(ends) == len(s.Topics) {
			return ends, nil
		}
	}
	return nil, fmt.Errorf("end offsets of %d of %d hot streams in 30 s", len(ends), len(s.Topics))
}

// consume reads the topics from from until total records with a new
// franz-go consumer (default options) and returns how many records it
// counted and in how long, from the first fetch that returned records
// (those not counted): the consumer's start-up is not the servers' rate.
func (s loadSpec) consume(ctx context.Context, from map[string]map[int32]kgo.Offset, total int64) (int64, time.Duration, error) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumePartitions(from))
	if err != nil {
		return 0, 0, err
	}
	defer cons.Close()
	var read, counted int64
	var start time.Time
	for read < total {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("consume %s: %w", t, err)) })
		if ferr != nil {
			return 0, 0, ferr
		}
		n := int64(fs.NumRecords())
		read += n
		if start.IsZero() {
			if n > 0 {
				start = time.Now()
			}
			continue
		}
		counted += n
	}
	return counted, time.Since(start), nil
}

// A load process (this test binary again) produces to and reads back from
// a real cluster and reports what it did.
func TestLoadProcess(t *testing.T) {
	c := newTestCluster(t, 64<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := runLoad(ctx, loadSpec{Brokers: c.brokers(), Topics: []string{"s"}, Seconds: 1})
	require.NoError(t, err)
	require.Positive(t, r.Acked)
	require.GreaterOrEqual(t, r.ProduceSecs, 1.0)
	require.Positive(t, r.Read, "records read after each consumer's first")
	require.LessOrEqual(t, r.Read, hotConsumeRounds*min(r.Acked, hotConsumeRecords))
	require.Positive(t, r.ConsumeSecs)
}
