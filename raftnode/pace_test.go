package raftnode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// TestPacedFetch: a snapshot install's entry copies go no faster than the
// rate (one second's burst and one chunk over), measured on a clock the
// waits advance.
func TestPacedFetch(t *testing.T) {
	const rate, chunk, total = 256 << 10, 64 << 10, 4 << 20
	clock := time.Unix(1000, 0)
	var waited time.Duration
	fetch := func(_, _, from, to uint64) ([]*raftpb.Entry, uint64, error) {
		clock = clock.Add(time.Millisecond) // the copy itself
		return []*raftpb.Entry{{Index: new(from), Data: make([]byte, chunk)}}, 0, nil
	}
	paced := PacedFetch(fetch, rate, func() time.Time { return clock }, func(d time.Duration) bool {
		waited += d
		clock = clock.Add(d)
		return true
	})
	start := clock
	type point struct {
		at    time.Duration
		bytes int64
	}
	var pts []point
	var copied int64
	for i := uint64(1); copied < total; i++ {
		ents, _, err := paced(1, 2, i, i)
		require.NoError(t, err)
		copied += int64(len(ents[0].Data))
		pts = append(pts, point{clock.Sub(start), copied})
	}
	elapsed := clock.Sub(start)
	t.Logf("copied %d bytes in %v at %d bytes/s: %.0f bytes/s measured, %v waited", copied, elapsed, rate, float64(copied)/elapsed.Seconds(), waited)
	require.GreaterOrEqual(t, elapsed, time.Duration(float64(total-rate-chunk)/rate*float64(time.Second)))
	for i := range pts {
		for j := i + 1; j < len(pts); j++ {
			span := (pts[j].at - pts[i].at).Seconds()
			require.LessOrEqual(t, float64(pts[j].bytes-pts[i].bytes), (span+1)*rate+chunk, "from %v to %v", pts[i].at, pts[j].at)
		}
	}

	// Stopping ends a wait.
	stopped := PacedFetch(fetch, rate, func() time.Time { return clock }, func(time.Duration) bool { return false })
	for range 10 {
		if _, _, err := stopped(1, 2, 1, 1); err != nil {
			require.ErrorIs(t, err, ErrStopped)
			return
		}
	}
	t.Fatal("a stopped wait did not end the copy")
}
