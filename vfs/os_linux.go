package vfs

import "golang.org/x/sys/unix"

// Mode 0: the blocks are reserved and the size grows, so later writes into
// the range change no metadata and fdatasync stays cheap.
func fallocate(fd int, size int64) error { return unix.Fallocate(fd, 0, 0, size) }

func fdatasync(fd int) error { return unix.Fdatasync(fd) }

func dropCache(fd int, off, n int64) error { return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) }

func prefetch(fd int, off, n int64) error { return unix.Fadvise(fd, off, n, unix.FADV_WILLNEED) }
