package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// A segment's file can end inside its last block: a segment holding no
// entry yet grows to exactly what its first entry needs when that entry
// is larger than a segment. Once it is closed, a direct read of it (whole
// blocks) meets the end of the file in its last block and must still
// return every record: raft's reads, the catch-up reads, and the next
// start's (the producer state is loaded from them). The release gate's
// dc3_replace found a server that could not start again: the OS file's
// ReadDirect wrapped io.EOF, which storage took for a failed read.
func TestClosedSegmentEndingInsideABlock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	opts := Options{FS: vfs.OS{}, Dir: dir, Stream: 1, SegmentSize: 256 << 10, TailCacheBytes: 4 << 10}
	var want [][]byte // batch bytes past the base offset and leader epoch (stamped)
	write := func(l *Log, from, to uint64) {
		for i := from; i <= to; i++ {
			b := kbatch(1+int(i%3), 1000+int(i*37%900), int64(i))
			if i == 1 {
				b = kbatch(1, 300<<10+1, 1) // larger than a segment
			}
			want = append(want, b[16:])
			require.NoError(t, l.Write([]*pb.Entry{ent(i, 1, userData(b))}, hardState(1, 1, i)))
		}
		_, err := l.Sync()
		require.NoError(t, err)
	}
	readAll := func(l *Log) {
		ents, err := l.Entries(1, uint64(len(want))+1, 1<<30)
		require.NoError(t, err)
		require.Len(t, ents, len(want))
		for i, e := range ents {
			require.Equal(t, want[i], e.Data[1+16:], "entry %d", i+1) // past TagUser
		}
		var got [][]byte
		for off, end := int64(0), l.EndOffset(); off < end; {
			bs, rb, err := l.ReadPooled(off, end, 64<<10)
			require.NoError(t, err)
			require.NotEmpty(t, bs)
			for _, b := range bs {
				got = append(got, append([]byte(nil), b.Data[16:]...))
				off = b.NextOffset
			}
			rb.Release()
		}
		require.Equal(t, want, got)
	}

	l := openMem(t, opts)
	write(l, 1, 400) // the first entry alone in the first segment, then rolls
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	require.Greater(t, len(segs), 2)
	fi, err := os.Stat(segs[0])
	require.NoError(t, err)
	require.NotZero(t, fi.Size()%vfs.DirectAlign, "the first segment, closed, ends inside a block")
	readAll(l)
	require.NoError(t, l.Close())

	l = openMem(t, opts) // a start after it reads them too
	defer l.Close()
	readAll(l)
}
