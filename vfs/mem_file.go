package vfs

import (
	"io"
	"io/fs"
	"slices"
	"syscall"
)

// memFile is an open file of a Mem.
type memFile struct {
	m      *Mem
	n      *memNode
	name   string // as opened
	gen    uint64
	closed bool
}

// check reports whether the handle may be used; m.mu must be held.
func (f *memFile) check(op string) error {
	switch {
	case f.closed:
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	case f.gen != f.m.gen:
		return &fs.PathError{Op: op, Path: f.name, Err: ErrCrashed}
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: syscall.EINVAL}
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// modify runs the common checks of a change that may grow the file to size.
func (f *memFile) modify(op string, size int64) error {
	if err := f.check(op); err != nil {
		return err
	}
	if size < 0 {
		return &fs.PathError{Op: op, Path: f.name, Err: syscall.EINVAL}
	}
	if !f.m.grow(f.n, size) {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrNoSpace}
	}
	return nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	end := off + int64(len(p))
	if off < 0 {
		end = -1 // rejected by modify
	}
	if err := f.modify("write", end); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := f.n
	cur := int64(len(n.data))
	u := undoRec{off: off, n: int64(len(p)), oldSize: cur}
	if off < cur {
		u.old = slices.Clone(n.data[off:min(end, cur)])
	}
	n.pending = append(n.pending, u)
	if end > cur {
		f.m.resize(n, end)
	}
	copy(n.data[off:], p)
	f.m.stats.Writes++
	f.m.stats.BytesWritten += int64(len(p))
	return len(p), nil
}

func (f *memFile) Size() (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.modify("truncate", size); err != nil {
		return err
	}
	f.m.setSize(f.n, size)
	return nil
}

func (f *memFile) Allocate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.modify("allocate", size); err != nil {
		return err
	}
	if size > int64(len(f.n.data)) {
		f.m.setSize(f.n, size)
	}
	return nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("sync"); err != nil {
		return err
	}
	f.n.pending = nil
	f.m.stats.Syncs++
	return nil
}

func (f *memFile) DropCache(off, n int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.check("fadvise")
}

// ReadDirect checks the alignment O_DIRECT asks for: the simulator's reads
// are held to it as the real disk's are.
func (f *memFile) ReadDirect(p []byte, off int64) (int, error) {
	if err := checkDirect(f.name, p, off); err != nil {
		return 0, err
	}
	return f.ReadAt(p, off)
}

func (f *memFile) Prefetch(off, n int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.check("fadvise")
}
