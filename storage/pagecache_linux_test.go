package storage

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"

	"github.com/vdl-project/vdl/vfs"
)

// residentPages counts the pages of path's first n bytes in the page cache.
func residentPages(t *testing.T, path string, n int) int {
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

// Synced data leaves the page cache, but for the last 2 MiB-aligned piece
// the next write continues; with KeepPageCache it stays.
func TestSyncDropsDurableDataFromPageCache(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "s")
		l, err := Open(Options{FS: vfs.OS{}, Dir: dir, Stream: 1, KeepPageCache: keep})
		require.NoError(t, err)
		data := userData(kbatch(1, 16<<10, 1))
		var ents []*pb.Entry
		for i := uint64(1); i <= 400; i++ { // about 6.4 MiB
			ents = append(ents, &pb.Entry{Term: new(uint64(1)), Index: new(i), Data: data})
		}
		require.NoError(t, l.Write(ents, nil))
		_, err = l.Sync()
		require.NoError(t, err)
		seg := filepath.Join(dir, "00000000000000000001.seg")
		resident := residentPages(t, seg, 6<<20)
		pages := (6 << 20) / os.Getpagesize()
		if keep {
			require.Greater(t, resident, pages*9/10, "keep: synced data stays cached")
		} else {
			require.Less(t, resident, pages/2, "synced data below the last 2 MiB boundary is dropped")
		}
		// Reads below the tail cache still work (from the disk).
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, bs)
		require.NoError(t, l.Close())
	}
}
