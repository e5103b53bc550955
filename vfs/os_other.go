//go:build !linux

package vfs

import "golang.org/x/sys/unix"

// Development builds off Linux: correct, but without the Linux-only calls.

func fallocate(int, int64) error { return unix.EOPNOTSUPP }

func fdatasync(fd int) error { return unix.Fsync(fd) }

func dropCache(int, int64, int64) error { return nil }

func prefetch(int, int64, int64) error { return nil }
