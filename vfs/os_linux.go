package vfs

import (
	"errors"

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
