package clustertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
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

// TestReadFence: fences pass on the leader (also when many are taken at
// once and while entries are committed), fail on a follower, and fail on a
// leader cut off from its peers.
func TestReadFence(t *testing.T) {
	c := New(t, Options{Nodes: []uint64{1, 2, 3}, Groups: []uint64{1}})
	ctx := deadline(t, time.Minute)
	produce(t, ctx, c, 1, 20, 4, 100, "f")
	l, err := c.WaitLeader(ctx, 1)
	require.NoError(t, err)
	ld := c.StartLoad(1, 16, 100, "fence-load") // reads race with commits
	defer stopLoad(t, ld)
	for round := 0; round < 200; round++ {
		var fs []*raftnode.Fence
		for i := 0; i < 5; i++ {
			fs = append(fs, l.Host().Fence(1))
		}
		for _, f := range fs {
			select {
			case <-f.Done():
				require.NoError(t, f.Err())
			case <-time.After(5 * time.Second):
				t.Fatal("a read fence on the leader never passed")
			}
		}
	}
	for _, n := range c.Running() {
		if n.ID == l.ID {
			continue
		}
		f := n.Host().Fence(1)
		select {
		case <-f.Done():
			require.ErrorIs(t, f.Err(), raftnode.ErrNotLeader)
		case <-time.After(5 * time.Second):
			t.Fatal("a fence on a follower must fail fast")
		}
	}
	c.Isolate(l.ID)
	f := l.Host().Fence(1)
	select {
	case <-f.Done():
		require.Error(t, f.Err(), "a cut-off leader cannot confirm its leadership")
	case <-time.After(3 * time.Second):
		// Not passed is what matters: it must not pass while cut off.
		require.False(t, f.Passed())
	}
	c.Heal()
}
