package vfs

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// cachedPages counts the pages of path's first n bytes in the page cache.
func cachedPages(t *testing.T, path string, n int) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno)
	c := 0
	for _, v := range vec {
		c += int(v & 1)
	}
	return c
}

// A direct read leaves the page cache as it found it, where a read through
// the cache fills it; the bytes are the same.
func TestReadDirectBypassesPageCache(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	const size = 4 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	require.NoError(t, os.WriteFile(name, data, 0o644))
	f, err := OS{}.Open(name)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	require.NoError(t, f.DropCache(0, size))
	require.Zero(t, cachedPages(t, name, size))

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
	name := filepath.Join(t.TempDir(), "f")
	const size = 1 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 13)
	}
	require.NoError(t, os.WriteFile(name, data, 0o644))
	f, err := OS{}.Open(name)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	require.NoError(t, f.DropCache(0, size))
	f.(*osFile).noDirect = true

	p := directBuf(t, size)
	n, err := f.ReadDirect(p, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Equal(t, data, p)
	require.Nil(t, f.(*osFile).direct)
	require.Less(t, cachedPages(t, name, size), size/os.Getpagesize()/10, "what it read is dropped")
}
