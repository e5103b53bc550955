package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/pagecache"
	"github.com/vdl-project/vdl/vfs"
)

// residentPages counts the pages of path's first n bytes in the page cache.
func residentPages(t *testing.T, path string, n int) int {
	t.Helper()
	c, err := pagecache.Resident(path, n)
	require.NoError(t, err)
	return c
}

// A closed segment leaves the page cache once durable, and what catch-up
// reads bring back leaves it again; the active segment stays. With
// KeepPageCache all stays.
func TestClosedSegmentsLeavePageCache(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "s")
		l, err := Open(Options{FS: vfs.OS{}, Dir: dir, Stream: 1, SegmentSize: 4 << 20, TailCacheBytes: 1 << 20, KeepPageCache: keep})
		require.NoError(t, err)
		data := userData(kbatch(1, 16<<10, 1))
		for i := uint64(1); i <= 400; i++ { // about 6.4 MiB: one segment closed
			require.NoError(t, l.Write([]*pb.Entry{{Term: new(uint64(1)), Index: new(i), Data: data}}, nil))
			if i%16 == 0 {
				_, err = l.Sync()
				require.NoError(t, err)
			}
		}
		_, err = l.Sync()
		require.NoError(t, err)
		segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
		require.NoError(t, err)
		require.Len(t, segs, 2)
		pages := (2 << 20) / os.Getpagesize()
		closed, active := residentPages(t, segs[0], 2<<20), residentPages(t, segs[1], 2<<20)
		require.Greater(t, active, pages*9/10, "the active segment stays cached")
		if keep {
			require.Greater(t, closed, pages*9/10, "keep: the closed segment stays cached")
		} else {
			require.Less(t, closed, pages/10, "the closed segment is dropped")
		}
		// Reads of the closed segment still work (from the disk), and
		// leave what they read out of the page cache too.
		bs, err := l.Read(0, l.EndOffset(), 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, bs)
		if !keep {
			require.Less(t, residentPages(t, segs[0], 512<<10), (512<<10)/os.Getpagesize()/10)
		}
		require.NoError(t, l.Close())
	}
}
