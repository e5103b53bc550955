package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/pagecache"
)

// cachedPages counts the pages of path's first n bytes in the page cache.
func cachedPages(t *testing.T, path string, n int) int {
	t.Helper()
	c, err := pagecache.Resident(path, n)
	require.NoError(t, err)
	return c
}

// coldFile writes size bytes to a new file, opens it and drops it from the
// page cache.
func coldFile(t *testing.T, size int) (f File, name string, data []byte) {
	name = filepath.Join(t.TempDir(), "f")
	data = make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	require.NoError(t, os.WriteFile(name, data, 0o644))
	f, err := OS{}.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, f.Sync())
	require.NoError(t, f.DropCache(0, int64(size)))
	require.Zero(t, cachedPages(t, name, size))
	return f, name, data
}

// A direct read leaves the page cache as it found it, where a read through
// the cache fills it; the bytes are the same.
func TestReadDirectBypassesPageCache(t *testing.T) {
	const size = 4 << 20
	f, name, data := coldFile(t, size)
	p := directBuf(t, size)
	n, err := f.ReadDirect(p, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Equal(t, data, p)
	require.Zero(t, cachedPages(t, name, size), "a direct read caches nothing")

	n, err = f.ReadAt(p, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Greater(t, cachedPages(t, name, size), size/os.Getpagesize()/2, "a read through the cache fills it")
}

// Without an O_DIRECT descriptor (a file system that refuses it) the read
// goes through the cache and drops what it read: the same bytes, nothing
// left cached.
func TestReadDirectFallbackDropsWhatItRead(t *testing.T) {
	const size = 1 << 20
	f, name, data := coldFile(t, size)
	f.(*osFile).noDirect = true
	p := directBuf(t, size)
	n, err := f.ReadDirect(p, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Equal(t, data, p)
	require.Nil(t, f.(*osFile).direct)
	require.Less(t, cachedPages(t, name, size), size/os.Getpagesize()/10, "what it read is dropped")
}
