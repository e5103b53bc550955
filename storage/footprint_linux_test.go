package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"

	"github.com/vdl-project/vdl/vfs"
)

// The empty stream's footprint on the real file system: the blocks its
// files have allocated (st_blocks), which fallocate counts before a byte is
// written.
func TestEmptyStreamFootprintOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	l, err := Open(Options{FS: vfs.OS{}, Dir: dir, Stream: 7})
	require.NoError(t, err)
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	require.NoError(t, l.Close())
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var total int64
	for _, n := range names {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(dir, n.Name()), &st))
		t.Logf("%s: %d bytes allocated", n.Name(), st.Blocks*512)
		total += st.Blocks * 512
	}
	require.LessOrEqual(t, total, int64(maxEmptyStreamBytes))
}
