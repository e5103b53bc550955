package configserver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLostDataDirDoesNotRefound: a config server whose data dir was lost
// restarts on an empty one (initial_cluster_state still "new") and must not
// bootstrap a second group: the others refuse its new data dir, so its log
// stays empty and it never serves; the other two keep serving. With
// "existing" it joins empty instead. On real files and loopback TCP.
func TestLostDataDirDoesNotRefound(t *testing.T) {
	tc := startConfigServers(t)
	cl := NewClient(tc.addrs, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc.leader()
	for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
		_, err := cl.Report(ctx, report(id, dc))
		require.NoError(t, err)
	}
	_, err := cl.CreateStream(ctx, StreamSpec{Name: "orders"})
	require.NoError(t, err)
	for _, s := range tc.svcs {
		require.True(t, s.ident.Member)
		require.NotZero(t, s.ident.DirID)
	}

	// The third config server (not the leader) loses its data dir.
	victim := (tc.leader() + 1) % 3
	old := tc.svcs[victim].ident.DirID
	require.NoError(t, tc.svcs[victim].Close())
	tc.svcs[victim] = nil
	require.NoError(t, os.RemoveAll(tc.cfgs[victim].DataDir))

	for _, state := range []string{"new", "existing"} {
		t.Run(state, func(t *testing.T) {
			tc.cfgs[victim].InitialClusterState = state
			tc.start(victim)
			s := tc.svcs[victim]
			defer func() {
				require.NoError(t, s.Close())
				tc.svcs[victim] = nil
				require.NoError(t, os.RemoveAll(tc.cfgs[victim].DataDir))
			}()
			require.NotEqual(t, old, s.ident.DirID, "a new data dir id")
			// Give it time to connect (and be refused).
			time.Sleep(2 * time.Second)
			last, err := s.slog.LastIndex()
			require.NoError(t, err)
			require.Zero(t, last, "the config server with a lost data dir bootstrapped a group")
			require.False(t, s.isLeader())
			st := s.tr.Stats()
			for _, p := range tc.cfgs[victim].Peers {
				if p.ID != tc.cfgs[victim].ID {
					require.False(t, st[p.ID].Connected, "config server %d accepted a data dir it does not know it by", p.ID)
				}
			}
			// The other two still serve.
			for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
				_, err := cl.Report(ctx, report(id, dc))
				require.NoError(t, err)
			}
			_, err = cl.CreateStream(ctx, StreamSpec{Name: "after-" + state})
			require.NoError(t, err)
		})
	}
}

// TestIdentityRefusesAnotherConfigServersDir: a data dir is tied to its
// cluster and config server id.
func TestIdentityRefusesAnotherConfigServersDir(t *testing.T) {
	tc := startConfigServers(t)
	tc.leader()
	require.NoError(t, tc.svcs[0].Close())
	tc.svcs[0] = nil
	cfg := tc.cfgs[0]
	cfg.DataDir = tc.cfgs[1].DataDir
	_, err := Start(cfg, nil)
	require.ErrorIs(t, err, ErrIdentity)
}
