package configserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// logBytes is the size of a config server's command log on disk. A file
// that vanishes between the directory's listing and its stat was deleted
// by retention meanwhile: it counts as gone, not as an error.
func logBytes(t *testing.T, dataDir string) int64 {
	t.Helper()
	var total int64
	err := filepath.Walk(filepath.Join(dataDir, "log"), func(_ string, fi os.FileInfo, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !fi.IsDir() {
			total += fi.Size()
		}
		return err
	})
	require.NoError(t, err)
	return total
}

// TestCompactionSurvivesRestart: the command log of every config server is
// compacted once enough commands are applied past its start (its state in
// bbolt is the snapshot), the log shrinks, and after all three restart the
// state is the same and they go on serving. On real files.
func TestCompactionSurvivesRestart(t *testing.T) {
	// The same commands without compaction: how large the log grows.
	// The servers report once: they must not be called down while a slow
	// machine runs the workload.
	plain := startConfigServersWith(t, func(c *Config) {
		c.CompactAfter = -1
		c.LogSegmentBytes = 4 << 10
		c.DownAfterMs = 600000
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	compactionWorkload(ctx, t, plain)
	uncompacted := logBytes(t, plain.cfgs[0].DataDir)
	require.Zero(t, plain.svcs[0].slog.StartOffset())
	for i, s := range plain.svcs {
		require.NoError(t, s.Close())
		plain.svcs[i] = nil
	}

	tc := startConfigServersWith(t, func(c *Config) {
		c.CompactAfter = 40
		c.LogSegmentBytes = 4 << 10
		c.DownAfterMs = 600000
	})
	cl := compactionWorkload(ctx, t, tc)
	// Every config server compacted: its log starts past 0 and shrank to
	// under half (compactions follow one another on the leader's clock:
	// wait for them, as the machine may be slow).
	require.Eventually(t, func() bool {
		for i, s := range tc.svcs {
			if s.slog.StartOffset() == 0 || logBytes(t, tc.cfgs[i].DataDir) >= uncompacted/2 {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the config log was never compacted to under half")
	// The deleted streams' tombstones are purged (no server reports them):
	// wait until that is over, so that the catalog compared is settled.
	var want []StreamStatus
	require.Eventually(t, func() bool {
		var err error
		want, err = cl.Streams(ctx)
		return err == nil && !slices.ContainsFunc(want, func(s StreamStatus) bool { return s.State != StreamActive })
	}, 30*time.Second, 100*time.Millisecond, "tombstones purged")
	version := tc.svcs[tc.leader()].state.Version()
	var starts []int64
	for i, s := range tc.svcs {
		starts = append(starts, s.slog.StartOffset())
		size := logBytes(t, tc.cfgs[i].DataDir)
		t.Logf("config server %d: log start %d, applied %d, log %d bytes (%d without compaction)", i+1, s.slog.StartOffset(), s.state.Applied(), size, uncompacted)
		require.Less(t, size, uncompacted/2)
	}

	// All three restart on their data dirs: same state.
	for i, s := range tc.svcs {
		require.NoError(t, s.Close())
		tc.svcs[i] = nil
	}
	for i := range tc.svcs {
		tc.start(i)
		require.GreaterOrEqual(t, tc.svcs[i].slog.StartOffset(), starts[i])
	}
	tc.leader()
	got, err := cl.Streams(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, version, tc.svcs[tc.leader()].state.Version())
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	_, err = cl.CreateStream(ctx, StreamSpec{Name: "after-restart"})
	require.NoError(t, err)
	_, err = cl.CreateStream(ctx, StreamSpec{Name: "s1"})
	require.ErrorIs(t, err, ErrExists, "a stream created before the compaction is still there")
}

// compactionWorkload creates 150 streams and deletes a third of them.
func compactionWorkload(ctx context.Context, t *testing.T, tc *testCluster) *Client {
	cl := NewClient(tc.addrs, false, nil)
	tc.leader()
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	for i := range 150 {
		_, err := cl.CreateStream(ctx, StreamSpec{Name: fmt.Sprintf("s%d", i)})
		require.NoError(t, err)
		if i%3 == 0 {
			require.NoError(t, cl.DeleteStream(ctx, fmt.Sprintf("s%d", i)))
		}
	}
	return cl
}

// TestStateBehindLogRefused: a state.db older than the compacted log's
// start (a lost state.db) is refused at start.
func TestStateBehindLogRefused(t *testing.T) {
	tc := startConfigServersWith(t, func(c *Config) {
		c.CompactAfter = 20
		c.LogSegmentBytes = 4 << 10
	})
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc.leader()
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	for i := range 80 {
		_, err := cl.CreateStream(ctx, StreamSpec{Name: fmt.Sprintf("s%d", i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return tc.svcs[2].slog.StartOffset() > 0 }, 20*time.Second, 100*time.Millisecond)
	require.NoError(t, tc.svcs[2].Close())
	tc.svcs[2] = nil
	require.NoError(t, os.Remove(filepath.Join(tc.cfgs[2].DataDir, "state.db")))
	_, err := Start(tc.cfgs[2], nil)
	require.ErrorIs(t, err, ErrIdentity)
	require.ErrorContains(t, err, "copy state.db from another config server")
}
