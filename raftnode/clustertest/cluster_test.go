package clustertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scale picks a count: full normally, short under -short, race under the
// race detector (the smaller of the two when both apply).
func scale(full, short, race int) int {
	n := full
	if testing.Short() {
		n = min(n, short)
	}
	if raceEnabled {
		n = min(n, race)
	}
	return n
}

func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produce proposes count single-record batches of valueSize bytes in
// group from workers concurrent proposers and returns the acknowledgments.
func produce(t *testing.T, ctx context.Context, c *Cluster, group uint64, count, workers, valueSize int, prefix string) []Acked {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var acked []Acked
	var firstErr error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(count) {
					return
				}
				a, err := c.Propose(ctx, group, Batch(Value(fmt.Sprintf("%s-%d|", prefix, i), valueSize)))
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else {
					acked = append(acked, a)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, firstErr)
	require.Len(t, acked, count)
	return acked
}

func endOf(acked []Acked) int64 {
	var end int64
	for _, a := range acked {
		end = max(end, a.Result.NextOffset)
	}
	return end
}

// requireConverged waits for convergence and checks density and acks on
// every replica; it returns the replicas.
func requireConverged(t *testing.T, ctx context.Context, c *Cluster, group uint64, acked []Acked) []Replica {
	t.Helper()
	reps, err := c.WaitConverged(ctx, group, endOf(acked))
	require.NoError(t, err)
	for _, r := range reps {
		require.NoError(t, r.Dense())
		n, err := r.CheckAcked(acked)
		require.NoError(t, err)
		if r.Start == 0 {
			require.Equal(t, len(acked), n)
		}
	}
	return reps
}

// requireDisjoint checks acked offset ranges never overlap (each ack is a
// distinct entry).
func requireDisjoint(t *testing.T, acked []Acked) {
	t.Helper()
	seen := make(map[int64]bool, len(acked))
	for _, a := range acked {
		require.Less(t, a.Result.BaseOffset, a.Result.NextOffset)
		require.False(t, seen[a.Result.BaseOffset], "two acks at offset %d", a.Result.BaseOffset)
		seen[a.Result.BaseOffset] = true
	}
}

func replicate(t *testing.T, nodes []uint64, count, workers int) {
	c := New(t, Options{Nodes: nodes, Groups: []uint64{1}})
	ctx := deadline(t, 3*time.Minute)
	start := time.Now()
	acked := produce(t, ctx, c, 1, count, workers, 100, "e")
	el := time.Since(start)
	t.Logf("%d nodes: %d entries acknowledged in %v (%.0f/s)", len(nodes), count, el.Round(time.Millisecond), float64(count)/el.Seconds())
	requireDisjoint(t, acked)
	reps := requireConverged(t, ctx, c, 1, acked)
	require.Len(t, reps, len(nodes))
	require.GreaterOrEqual(t, reps[0].HWM, int64(count))
}

func TestReplicate3Nodes(t *testing.T) {
	replicate(t, []uint64{1, 2, 3}, scale(100_000, 10_000, 5_000), 64)
}

func TestReplicate5Nodes(t *testing.T) {
	replicate(t, []uint64{1, 2, 3, 4, 5}, scale(20_000, 3_000, 2_000), 64)
}
