package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direct reads. A catch-up consumer reads closed segments, which are kept
// out of the page cache (storage's KeepPageCache): read through the cache,
// each MiB cost a fadvise to start the reads ahead, a copy out of the
// cache and a fadvise to drop the pages again, two fifths of a leader's
// CPU while ten consumers caught up (docs/performance.md). File.ReadDirect
// reads them with O_DIRECT into the caller's aligned memory instead.

// DirectAlign is the alignment File.ReadDirect asks of the memory, offset
// and length of a read: the page size, a multiple of every block size
// O_DIRECT asks for.
const DirectAlign = 4096

// AlignedBuf returns a slice of n bytes (n rounded up to DirectAlign) of
// buf whose first byte is DirectAlign-aligned; buf must hold n+DirectAlign
// bytes. ok is false when it does not.
func AlignedBuf(buf []byte, n int) (aligned []byte, ok bool) {
	n = AlignUp(n)
	if len(buf) < n+DirectAlign {
		return nil, false
	}
	skip := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % DirectAlign); r != 0 {
		skip = DirectAlign - r
	}
	return buf[skip : skip+n : skip+n], true
}

// AlignUp rounds n up to a multiple of DirectAlign.
func AlignUp[T int | int64](n T) T { return (n + DirectAlign - 1) &^ (DirectAlign - 1) }

// AlignDown rounds n down to a multiple of DirectAlign.
func AlignDown[T int | int64](n T) T { return n &^ (DirectAlign - 1) }

// checkDirect rejects a direct read that is not aligned, as the kernel
// does (EINVAL), on every file system: the fallbacks and Mem check what
// O_DIRECT would, so the simulator and the tests catch a misaligned read.
func checkDirect(name string, p []byte, off int64) error {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	if off < 0 || off%DirectAlign != 0 || len(p)%DirectAlign != 0 || addr%DirectAlign != 0 {
		return &fs.PathError{Op: "read direct", Path: name, Err: syscall.EINVAL}
	}
	return nil
}

// ReadDirect implements File. The O_DIRECT descriptor is opened on first
// use beside the file's own (the same inode, through /proc/self/fd, so a
// rename since cannot misdirect it). Where it cannot be opened (a file
// system that refuses O_DIRECT, no /proc, out of descriptors) the read
// goes through the cache, whose pages are then dropped.
func (f *osFile) ReadDirect(p []byte, off int64) (int, error) {
	if err := checkDirect(f.f.Name(), p, off); err != nil {
		return 0, err
	}
	d, err := f.directFile()
	if err != nil {
		return 0, err
	}
	if d != nil {
		var n int
		eof := false
		err = fdOp(d, "pread", func(fd int) error {
			var e error
			n, e = preadDirect(fd, p, off)
			eof = e == io.EOF
			if eof {
				return nil // the end of the file is no failure of the read
			}
			return e
		})
		if eof && err == nil {
			// io.EOF itself, as ReadAt returns it: its callers compare
			// it. Wrapped, the read of the last block of a closed
			// segment whose file ends inside that block (its allocation
			// started at what a large first entry needed) failed, and
			// with it the server's next start (the release gate's
			// dc3_replace).
			return n, io.EOF
		}
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		// A device whose blocks are larger than DirectAlign: through the
		// cache from now on.
		f.mu.Lock()
		f.noDirect = true
		f.mu.Unlock()
	}
	n, err := f.ReadAt(p, off)
	if n > 0 {
		_ = f.DropCache(off, int64(n))
	}
	return n, err
}

// preadDirect reads p at off, again after a short read of whole blocks; a
// short read of part of a block is the end of the file.
func preadDirect(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(fd, p[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
		if m == 0 || m%DirectAlign != 0 {
			break
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// directFile returns the O_DIRECT descriptor, nil if there is none: the
// file system or device refuses it (for good), or opening it failed (this
// time).
func (f *osFile) directFile() (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return nil, &fs.PathError{Op: "read direct", Path: f.f.Name(), Err: fs.ErrClosed}
	case f.noDirect:
		return nil, nil
	case f.direct != nil:
		return f.direct, nil
	}
	err := fdOp(f.f, "open direct", func(fd int) error {
		var e error
		f.direct, e = openDirect(fd)
		return e
	})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, fs.ErrNotExist) {
		f.noDirect = true
	}
	return f.direct, nil
}
