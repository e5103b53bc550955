package vfs

import (
	"errors"
	"io"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Mode 0: the blocks are reserved and the size grows, so later writes into
// the range change no metadata and fdatasync stays cheap.
func fallocate(fd int, size int64) error { return unix.Fallocate(fd, 0, 0, size) }

func fdatasync(fd int) error { return unix.Fdatasync(fd) }

func dropCache(fd int, off, n int64) error { return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) }

func prefetch(fd int, off, n int64) error { return unix.Fadvise(fd, off, n, unix.FADV_WILLNEED) }

// dataAfter seeks the data region at or after off (the descriptor's
// offset moves; VDL's reads and writes are positional). ENXIO: none.
func dataAfter(fd int, off int64) (start, end int64, ok bool, err error) {
	start, err = unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	end, err = unix.Seek(fd, start, unix.SEEK_HOLE)
	return start, end, err == nil, err
}

// maxIov is the most buffers one pwritev takes (IOV_MAX on Linux).
const maxIov = 1024

func (f *osFile) WriteAtv(bufs [][]byte, off int64) error {
	return f.fdOp("pwritev", func(fd int) error { return pwritevAll(fd, bufs, off) })
}

// pwritevAll writes bufs at off with pwritev, again for what a call left.
func pwritevAll(fd int, bufs [][]byte, off int64) error {
	bufs = slices.Clone(bufs) // trimmed below; the caller's stay whole
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		n, err := unix.Pwritev(fd, bufs[:min(len(bufs), maxIov)], off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 {
			k := min(n, len(bufs[0]))
			bufs[0], n = bufs[0][k:], n-k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
	return nil
}

// openDirect opens the file of fd again, for reading with O_DIRECT.
func openDirect(fd int) (*os.File, error) {
	return os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_DIRECT, 0)
}
