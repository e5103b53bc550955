package vfs

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// OS is the real file system. The zero value is ready to use: it holds no
// state, so every component can make its own.
type OS struct{}

var _ FS = OS{}

// Create implements FS.
func (OS) Create(name string) (File, error) {
	return openOS(name, os.O_CREATE|os.O_TRUNC|os.O_RDWR)
}

// Open implements FS.
func (OS) Open(name string) (File, error) {
	return openOS(name, os.O_RDWR)
}

func openOS(name string, flag int) (File, error) {
	f, err := os.OpenFile(name, flag, 0o644)
	if err != nil {
		return nil, mapErr(err)
	}
	return &osFile{f: f}, nil
}

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return mapErr(os.Rename(oldname, newname)) }

// Remove implements FS.
func (OS) Remove(name string) error { return mapErr(os.Remove(name)) }

// MkdirAll implements FS.
func (OS) MkdirAll(dir string) error { return mapErr(os.MkdirAll(dir, 0o755)) }

// List implements FS.
func (OS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, mapErr(err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// Stat implements FS.
func (OS) Stat(name string) (int64, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, mapErr(err)
	}
	return fi.Size(), nil
}

// SyncDir implements FS. fsync on the directory is what persists its
// entries; fdatasync is not enough for directories on every file system.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return mapErr(err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return mapErr(err)
}

// FreeSpace implements FS. Bavail, not Bfree: blocks reserved for root are
// not ours to fill.
func (OS) FreeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, mapErr(&fs.PathError{Op: "statfs", Path: dir, Err: err})
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

type osFile struct {
	f *os.File

	mu       sync.Mutex
	closed   bool
	direct   *os.File // ReadDirect's, opened on first use
	noDirect bool     // the file system refused O_DIRECT
}

func (f *osFile) Name() string { return f.f.Name() }

func (f *osFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(p, off)
	return n, mapErr(err)
}

func (f *osFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.f.WriteAt(p, off)
	return n, mapErr(err)
}

func (f *osFile) Close() error {
	f.mu.Lock()
	f.closed = true
	d := f.direct
	f.mu.Unlock()
	if d != nil {
		_ = d.Close()
	}
	return mapErr(f.f.Close())
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, mapErr(err)
	}
	return fi.Size(), nil
}

func (f *osFile) Truncate(size int64) error { return mapErr(f.f.Truncate(size)) }

func (f *osFile) Allocate(size int64) error {
	if size <= 0 {
		return nil // fallocate rejects a zero length; nothing to reserve
	}
	err := f.fdOp("fallocate", func(fd int) error { return fallocate(fd, size) })
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	// The file system cannot reserve blocks (tmpfs on old kernels, some
	// network file systems): at least give the file its size.
	cur, err := f.Size()
	if err != nil || cur >= size {
		return err
	}
	return f.Truncate(size)
}

func (f *osFile) Sync() error {
	return f.fdOp("fdatasync", fdatasync)
}

func (f *osFile) DropCache(off, n int64) error {
	if n <= 0 {
		return nil
	}
	return f.fdOp("fadvise", func(fd int) error { return dropCache(fd, off, n) })
}

func (f *osFile) Prefetch(off, n int64) error {
	if n <= 0 {
		return nil
	}
	return f.fdOp("fadvise", func(fd int) error { return prefetch(fd, off, n) })
}

func (f *osFile) DataAfter(off int64) (start, end int64, ok bool, err error) {
	err = f.fdOp("lseek", func(fd int) error {
		var e error
		start, end, ok, e = dataAfter(fd, off)
		return e
	})
	return start, end, ok, err
}

// fdOp runs fn on the descriptor through SyscallConn so a concurrent Close
// cannot recycle the fd under us, and names the failing call in the error.
func (f *osFile) fdOp(op string, fn func(fd int) error) error { return fdOp(f.f, op, fn) }

func fdOp(f *os.File, op string, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return mapErr(err)
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return mapErr(err)
	}
	if opErr != nil {
		return mapErr(&fs.PathError{Op: op, Path: f.Name(), Err: opErr})
	}
	return nil
}

// kindError tags an OS error with ErrNoSpace or ErrIO so callers can test
// for the condition portably, while the message stays the OS's own.
type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &kindError{kind: ErrNoSpace, err: err}
	case errors.Is(err, syscall.EIO):
		return &kindError{kind: ErrIO, err: err}
	}
	return err
}
