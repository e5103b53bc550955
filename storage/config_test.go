package storage

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/vfs"
)

// The replicated config: applied in index order (a replay changes
// nothing), reset replaces, durable in the meta file, carried by
// snapshots; a meta or snapshot from before it decodes with no config.
func TestStreamConfigApplyAndPersist(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	l := openMem(t, opts)
	require.Empty(t, l.Config())
	require.NoError(t, l.ApplyConfig(5, false, []ConfigOp{{Key: "retention.ms", Value: "1000"}, {Key: "preferred.dc", Value: "a"}}))
	require.NoError(t, l.ApplyConfig(7, false, []ConfigOp{{Key: "preferred.dc", Delete: true}, {Key: "retention.bytes", Value: "9"}}))
	require.NoError(t, l.ApplyConfig(6, true, nil), "an older command (replayed) changes nothing")
	want := map[string]string{"retention.ms": "1000", "retention.bytes": "9"}
	require.Equal(t, want, l.Config())
	mem.CrashClean()
	l = openMem(t, opts)
	require.Equal(t, want, l.Config())

	d := snapDesc{first: 1, config: l.meta.config}
	b, err := d.encode()
	require.NoError(t, err)
	got, err := decodeSnapDesc(b)
	require.NoError(t, err)
	require.Equal(t, d.config, got.config)
	// An older snapshot (no config section) still decodes.
	old := snapDesc{first: 1}
	b, err = old.encode()
	require.NoError(t, err)
	got, err = decodeSnapDesc(b[:len(b)-12])
	require.NoError(t, err)
	require.Empty(t, got.config.values)

	require.NoError(t, l.adoptConfig(streamConfig{index: 9, values: map[string]string{"max.message.bytes": "10"}}))
	require.NoError(t, l.adoptConfig(streamConfig{index: 8, values: map[string]string{"x": "y"}}), "older: ignored")
	require.NoError(t, l.ApplyConfig(10, true, []ConfigOp{{Key: "cleanup.policy", Value: "delete"}}))
	require.Equal(t, map[string]string{"cleanup.policy": "delete"}, l.Config())
}
