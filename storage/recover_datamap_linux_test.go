package storage

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// Recovery reads a segment's data, not its whole allocation: an idle
// stream's restart read its 128 KiB of reserved zeros twice (the chain
// walk, then the search for valid records beyond its end), a gigabyte
// and seconds of CPU for a server with 10,000 streams.
func TestRecoveryReadsOnlyTheData(t *testing.T) {
	cfs := &countFS{FS: vfs.OS{}}
	opts := Options{FS: cfs, Dir: filepath.Join(t.TempDir(), "s"), Stream: 7}
	l := openMem(t, opts)
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	require.NoError(t, l.Write([]*pb.Entry{userEnt(2, 1, 3, 100, 1), userEnt(3, 1, 3, 100, 2)}, nil))
	_, err := l.Sync()
	require.NoError(t, err)
	alloc := l.active().allocated
	require.NoError(t, l.Close())

	cfs.readBytes.Store(0)
	l = openMem(t, opts)
	defer l.Close()
	read := cfs.readBytes.Load()
	t.Logf("opening a segment of %d bytes allocated read %d bytes", alloc, read)
	require.Less(t, read, alloc/4)
	last, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(3), last)
}

// A record valid on its own beyond the end of the chain is found although
// unwritten blocks lie between (damage in the middle, not a torn tail),
// when the search skips what the file says holds no data.
func TestValidRecordBeyondAHoleIsFound(t *testing.T) {
	opts := Options{FS: vfs.OS{}, Dir: filepath.Join(t.TempDir(), "s"), Stream: 7}
	l := openMem(t, opts)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, l.Write([]*pb.Entry{userEnt(i, 1, 1, 200, 1)}, nil))
	}
	_, err := l.Sync()
	require.NoError(t, err)
	l.mu.RLock()
	seg, r2, r3, alloc := l.active().base+".seg", l.ridx[1], l.ridx[2], l.active().allocated
	l.mu.RUnlock()
	require.NoError(t, l.Close())

	f, err := vfs.OS{}.Open(seg)
	require.NoError(t, err)
	rec := make([]byte, recSize(int(r3.length)))
	_, err = f.ReadAt(rec, r3.pos)
	require.NoError(t, err)
	far := alloc - 8<<10 // a block of its own, after reserved blocks never written
	_, err = f.WriteAt(rec, far)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, len(rec)), r3.pos) // gone from its place
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xAA}, r2.pos+recHeaderSize+5) // record 2 damaged
	require.NoError(t, err)
	m := f.(vfs.DataMap)
	_, end, ok, err := m.DataAfter(r3.pos)
	require.NoError(t, err)
	require.True(t, ok)
	if end >= far {
		t.Skip("this file system reports reserved blocks as data: no hole to skip")
	}
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	_, err = Open(opts)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "invalid record followed by a valid one")
}
