package vfs

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An OS file tells where its data lies: the blocks written, not the ones
// reserved (fallocate) and never written, nor holes.
func TestOSFileDataMap(t *testing.T) {
	f, err := OS{}.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Allocate(2<<20))
	block := bytes.Repeat([]byte{1}, 4096)
	_, err = f.WriteAt(block, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(block, 1<<20)
	require.NoError(t, err)
	m, ok := f.(DataMap)
	require.True(t, ok)
	start, _, ok, err := m.DataAfter(4096)
	require.NoError(t, err)
	if ok && start == 4096 {
		t.Skip("this file system reports reserved blocks as data")
	}
	for _, tc := range []struct {
		off, start, end int64
		ok              bool
	}{{0, 0, 4096, true}, {100, 100, 4096, true}, {4096, 1 << 20, 1<<20 + 4096, true}, {1<<20 + 4096, 0, 0, false}} {
		start, end, ok, err := m.DataAfter(tc.off)
		require.NoError(t, err)
		require.Equal(t, tc.ok, ok, "from %d", tc.off)
		if ok {
			require.Equal(t, []int64{tc.start, tc.end}, []int64{start, end}, "from %d", tc.off)
		}
	}
}
