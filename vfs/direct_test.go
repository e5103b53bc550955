package vfs

import (
	"bytes"
	"io"
	"path"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// directBuf returns n aligned bytes.
func directBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, ok := AlignedBuf(make([]byte, n+DirectAlign), n)
	require.True(t, ok)
	return b
}

// ReadDirect reads what ReadAt reads, ends short with io.EOF at the end
// of the file, and refuses what O_DIRECT refuses, on every FS.
func TestReadDirectConformance(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			fsys, root := impl.new(t)
			name := path.Join(root, "f")
			f, err := fsys.Create(name)
			require.NoError(t, err)
			defer f.Close()
			data := bytes.Repeat([]byte("0123456789abcdef"), (3*DirectAlign+100)/16+1)[:3*DirectAlign+100]
			_, err = f.WriteAt(data, 0)
			require.NoError(t, err)
			require.NoError(t, f.Sync())

			p := directBuf(t, 2*DirectAlign)
			n, err := f.ReadDirect(p, DirectAlign)
			require.NoError(t, err)
			require.Equal(t, 2*DirectAlign, n)
			require.Equal(t, data[DirectAlign:3*DirectAlign], p)

			// Past the end: 100 bytes, then none. io.EOF itself, as
			// ReadAt returns it (callers compare it, as io.ReaderAt's do).
			p = directBuf(t, 2*DirectAlign)
			n, err = f.ReadDirect(p, 3*DirectAlign)
			require.Equal(t, io.EOF, err)
			require.Equal(t, data[3*DirectAlign:], p[:n])
			n, err = f.ReadDirect(p, 8*DirectAlign)
			require.Equal(t, io.EOF, err)
			require.Zero(t, n)

			// A write after the read is seen by the next (one inode, two descriptors).
			_, err = f.WriteAt([]byte("NEW"), DirectAlign)
			require.NoError(t, err)
			n, err = f.ReadDirect(p[:DirectAlign], DirectAlign)
			require.NoError(t, err)
			require.Equal(t, "NEW", string(p[:3]))

			for _, bad := range []struct {
				p   []byte
				off int64
			}{
				{p[:DirectAlign], 512},          // offset
				{p[:DirectAlign-512], 0},        // length
				{p[512 : 512+DirectAlign], 0},   // memory
				{p[:DirectAlign], -DirectAlign}, // negative
			} {
				_, err := f.ReadDirect(bad.p, bad.off)
				require.ErrorIs(t, err, syscall.EINVAL)
			}
			require.NoError(t, f.Close())
			_, err = f.ReadDirect(p, 0)
			require.Error(t, err, "closed")
		})
	}
}

func TestAlignedBuf(t *testing.T) {
	for _, n := range []int{1, DirectAlign, DirectAlign + 1, 1 << 20} {
		buf := make([]byte, AlignUp(n)+DirectAlign+7)
		for skip := range 8 {
			b, ok := AlignedBuf(buf[skip:], n)
			require.True(t, ok)
			require.Equal(t, AlignUp(n), len(b))
			require.NoError(t, checkDirect("x", b, 0))
		}
	}
	_, ok := AlignedBuf(make([]byte, DirectAlign), 1)
	require.False(t, ok, "no room to align")
	require.Equal(t, int64(2*DirectAlign), AlignUp(int64(DirectAlign+1)))
	require.Equal(t, DirectAlign, AlignDown(2*DirectAlign-1))
}
