package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/storage"
)

// The default tail cache budget is a fraction of memory within its bounds.
func TestDefaultTailBudget(t *testing.T) {
	b := defaultTailBudget()
	require.GreaterOrEqual(t, b, int64(minTailBudget))
	require.LessOrEqual(t, b, int64(maxTailBudget))
	if m := memoryLimit(); m > 0 {
		require.Equal(t, min(max(m/16, minTailBudget), maxTailBudget), b)
	}
}

// The catch-up read budget defaults to storage's, and refuses negatives.
func TestCatchUpReadBudgetConfig(t *testing.T) {
	cfg := Config{NodeID: 1, DataDir: "d", KafkaListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", Peers: []Peer{{ID: 1}},
		TLS: TLSConfig{InsecurePeers: true}}
	require.NoError(t, cfg.Validate())
	require.Equal(t, int64(storage.DefaultCatchUpReadBytes), cfg.Storage.CatchUpReadBytes)
	require.Zero(t, cfg.Storage.CatchUpReadBytesPerSec)
	cfg.Storage.CatchUpReadBytesPerSec = -1
	require.ErrorContains(t, cfg.Validate(), "catchup_read_bytes_per_sec -1 is negative")

	// Catch-up reads yield to writes unless told not to.
	require.False(t, cfg.Storage.CatchUpReadsNoYield)
	path := filepath.Join(t.TempDir(), "vdl.toml")
	require.NoError(t, os.WriteFile(path, []byte("node_id = 1\ndata_dir = \"d\"\n[storage]\ncatchup_reads_no_yield = true\n"), 0o600))
	loaded, err := LoadConfig(path)
	require.NoError(t, err)
	require.True(t, loaded.Storage.CatchUpReadsNoYield)
}
