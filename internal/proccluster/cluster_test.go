package proccluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/server"
)

// TestConfigLoads: the config the harness writes is one the server takes
// (LoadConfig refuses unknown keys) with every option set.
func TestConfigLoads(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{tb: t, opts: Options{Profile: "kafka-0.10", Streams: []string{"a", "b"}, TickMillis: 20,
		SegmentBytes: 1 << 20, TailCacheBytes: 2 << 20, LogLevel: "warn"}}
	for id := range uint64(2) {
		addr := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", 9000+4*int(id)+port) }
		c.Nodes = append(c.Nodes, &Node{ID: id + 1, Kafka: addr(0), Raft: addr(1), Admin: addr(2), KafkaTLS: addr(3),
			ConfigPath: filepath.Join(dir, fmt.Sprintf("node%d.toml", id+1)), DataDir: filepath.Join(dir, fmt.Sprint(id+1))})
	}
	c.writeConfigs()
	cfg, err := server.LoadConfig(c.Nodes[1].ConfigPath)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, uint64(2), cfg.NodeID)
	require.Equal(t, "kafka-0.10", cfg.Profile)
	require.Equal(t, 20, cfg.Raft.TickMillis)
	require.EqualValues(t, 1<<20, cfg.Storage.SegmentBytes)
	require.EqualValues(t, 2<<20, cfg.Storage.TailCacheBytes)
	require.Len(t, cfg.Peers, 2)
	require.Equal(t, c.Nodes[0].Admin, cfg.Peers[0].Admin)
	require.Equal(t, c.Nodes[1].KafkaTLS, cfg.KafkaTLSListen)
	require.Equal(t, c.Nodes[0].KafkaTLS, cfg.Peers[0].KafkaTLS)
	require.Equal(t, "b", cfg.Streams[1].Name)
	require.Equal(t, uint64(2), cfg.Streams[1].ID)
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	require.NoError(t, os.WriteFile(p, []byte("a\nb\nc\n"), 0o644))
	require.Equal(t, "b\nc", Tail(p, 2))
	require.Equal(t, "a\nb\nc", Tail(p, 10))
	require.Contains(t, Tail(p+"-missing", 2), "no such file")
}
