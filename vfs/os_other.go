//go:build !linux

package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Development builds off Linux: correct, but without the Linux-only calls.

func fallocate(int, int64) error { return unix.EOPNOTSUPP }

func fdatasync(fd int) error { return unix.Fsync(fd) }

func dropCache(int, int64, int64) error { return nil }

func prefetch(int, int64, int64) error { return nil }

// dataAfter: all of the file is data.
func dataAfter(fd int, off int64) (start, end int64, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, false, err
	}
	return off, st.Size, off < st.Size, nil
}

func (f *osFile) WriteAtv(bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

// openDirect: no O_DIRECT here; ReadDirect reads through the cache.
func openDirect(int) (*os.File, error) { return nil, unix.EOPNOTSUPP }
