package vfs

import (
	"io/fs"
	"strings"
	"sync"
)

// ErrorFS wraps an FS and injects faults into what passes through it, apart
// from the medium it wraps (as pebble's vfs/errorfs): Mem models the disk
// and what a power loss keeps; ErrorFS models a failing device between it
// and the process.
//
// Fault model:
//   - failed writes and syncs (EIO): the injectors decide, operation by
//     operation; a failed operation changes nothing, so a failed sync
//     leaves the pending changes pending;
//   - one misdirected write (Misdirect): a write that lands off target and
//     reports success.
//
// A fault fires only on an operation the wrapped FS would have accepted:
// a closed or crashed handle, or a negative offset or size, gets the
// wrapped FS's own error and leaves the faults armed.
//
// ErrorFS is safe for concurrent use; with the same calls in the same order
// it injects the same faults.
type ErrorFS struct {
	fs FS

	mu        sync.Mutex
	injectors []Injector
	misdirect misdirection
	// misdirected counts the writes that landed elsewhere.
	misdirected int64
}

// An OpKind is a kind of operation an Injector can fail.
type OpKind int

const (
	// OpWrite is File.WriteAt, File.Truncate and File.Allocate.
	OpWrite OpKind = iota
	// OpSync is File.Sync and FS.SyncDir.
	OpSync
)

// An Op is an operation about to reach the wrapped FS.
type Op struct {
	Kind OpKind
	// Path is cleaned; for a file operation, the path it was opened with.
	Path string
}

// An Injector decides whether an operation fails. ErrorFS calls it with
// its lock held, one operation at a time, so an injector may keep state.
type Injector interface {
	// MaybeError returns the error op fails with, or nil to let it through.
	MaybeError(op Op) error
}

// Faults is the injector of the simulator's disk faults: the next
// FailWrites writes and the next FailSyncs syncs under Path fail with
// ErrIO. The counters count down as faults fire.
type Faults struct {
	// Path limits the faults to paths starting with it ("" matches all).
	// For file operations it is the path the file was opened with.
	Path string
	// FailWrites fails the next FailWrites WriteAt, Truncate and Allocate
	// calls with ErrIO; nothing is changed.
	FailWrites int
	// FailSyncs fails the next FailSyncs Sync and SyncDir calls with ErrIO;
	// nothing becomes durable, the pending changes stay pending.
	FailSyncs int
}

// MaybeError implements Injector.
func (f *Faults) MaybeError(op Op) error {
	counter := &f.FailWrites
	if op.Kind == OpSync {
		counter = &f.FailSyncs
	}
	if *counter <= 0 || !strings.HasPrefix(op.Path, f.Path) {
		return nil
	}
	*counter--
	return ErrIO
}

// NewErrorFS wraps fs, with no faults armed.
func NewErrorFS(fs FS) *ErrorFS { return &ErrorFS{fs: fs} }

var _ FS = (*ErrorFS)(nil)

// Inject adds injectors, consulted in order after those already added: the
// first error wins.
func (e *ErrorFS) Inject(injs ...Injector) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.injectors = append(e.injectors, injs...)
}

// SetFaults replaces every injector with f (none when f injects nothing).
func (e *ErrorFS) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.injectors = nil
	if f != (Faults{}) {
		if f.Path != "" {
			f.Path = clean(f.Path)
		}
		e.injectors = []Injector{&f}
	}
}

// Faults returns what the Faults set by SetFaults have not fired yet.
func (e *ErrorFS) Faults() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, inj := range e.injectors {
		if f, ok := inj.(*Faults); ok {
			return *f
		}
	}
	return Faults{}
}

// armed reports whether an injector may fail an operation; e.mu held.
func (e *ErrorFS) armed() bool { return len(e.injectors) > 0 }

// maybeError asks the injectors about op. usable reports whether the
// wrapped FS would accept op; it is asked only when some injector is
// armed, so a fault never fires on an operation that fails anyway.
func (e *ErrorFS) maybeError(op Op, usable func() bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.armed() || !usable() {
		return nil
	}
	for _, inj := range e.injectors {
		if err := inj.MaybeError(op); err != nil {
			return err
		}
	}
	return nil
}

// misdirection is an armed misdirected write.
type misdirection struct {
	armed bool
	path  string // cleaned prefix; "" matches all
	shift int64
}

// Misdirect arms one misdirected write: the next WriteAt to a file whose
// path (as opened, cleaned) starts with prefix ("" matches all) lands shift
// bytes away from where it was asked to (at offset 0 if that is negative),
// in the same file, and reports success as if it had landed where asked.
// The intended range keeps its old content (a lost write) and the bytes at
// the landing place are overwritten (collateral damage); the misdirected
// write is pending like any write (a crash may drop or tear it). It fires
// once, on a write that succeeds; arming again replaces an armed one.
// shift 0 disarms.
func (e *ErrorFS) Misdirect(prefix string, shift int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if prefix != "" {
		prefix = clean(prefix)
	}
	e.misdirect = misdirection{armed: shift != 0, path: prefix, shift: shift}
}

// MisdirectArmed reports whether a misdirected write is armed and has not
// fired yet.
func (e *ErrorFS) MisdirectArmed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.misdirect.armed
}

// Misdirected counts the writes that landed elsewhere.
func (e *ErrorFS) Misdirected() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.misdirected
}

func (e *ErrorFS) wrap(f File, name string) File {
	return &errorFile{File: f, e: e, path: clean(name)}
}

// Create implements FS.
func (e *ErrorFS) Create(name string) (File, error) {
	f, err := e.fs.Create(name)
	if err != nil {
		return nil, err
	}
	return e.wrap(f, name), nil
}

// Open implements FS.
func (e *ErrorFS) Open(name string) (File, error) {
	f, err := e.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return e.wrap(f, name), nil
}

// Rename implements FS.
func (e *ErrorFS) Rename(oldname, newname string) error { return e.fs.Rename(oldname, newname) }

// Remove implements FS.
func (e *ErrorFS) Remove(name string) error { return e.fs.Remove(name) }

// MkdirAll implements FS.
func (e *ErrorFS) MkdirAll(dir string) error { return e.fs.MkdirAll(dir) }

// List implements FS.
func (e *ErrorFS) List(dir string) ([]string, error) { return e.fs.List(dir) }

// Stat implements FS.
func (e *ErrorFS) Stat(name string) (int64, error) { return e.fs.Stat(name) }

// FreeSpace implements FS.
func (e *ErrorFS) FreeSpace(dir string) (uint64, error) { return e.fs.FreeSpace(dir) }

// SyncDir implements FS.
func (e *ErrorFS) SyncDir(dir string) error {
	isDir := func() bool { _, err := e.fs.List(dir); return err == nil }
	if err := e.maybeError(Op{Kind: OpSync, Path: clean(dir)}, isDir); err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	return e.fs.SyncDir(dir)
}

// errorFile is an open file of an ErrorFS.
type errorFile struct {
	File
	e    *ErrorFS
	path string // cleaned, for fault matching
}

// usable reports whether the wrapped file is open (not closed, not from
// before a crash).
func (f *errorFile) usable() bool {
	_, err := f.File.Size()
	return err == nil
}

// fail wraps an injected error as the wrapped FS would its own.
func (f *errorFile) fail(op string, err error) error {
	return &fs.PathError{Op: op, Path: f.Name(), Err: err}
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return f.File.WriteAt(p, off)
	}
	if err := f.e.maybeError(Op{Kind: OpWrite, Path: f.path}, f.usable); err != nil {
		return 0, f.fail("write", err)
	}
	if n, landed, err := f.writeMisdirected(p, off); landed {
		return n, err
	}
	return f.File.WriteAt(p, off)
}

// writeMisdirected makes the write land elsewhere if a misdirection is
// armed for it (landed: the write went, or failed, off target); it disarms
// only once a write succeeded.
func (f *errorFile) writeMisdirected(p []byte, off int64) (n int, landed bool, err error) {
	e := f.e
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.misdirect
	if !m.armed || len(p) == 0 || !strings.HasPrefix(f.path, m.path) || !f.usable() {
		return 0, false, nil
	}
	if _, err := f.File.WriteAt(p, max(off+m.shift, 0)); err != nil {
		return 0, true, err
	}
	e.misdirect.armed = false
	e.misdirected++
	return len(p), true, nil
}

func (f *errorFile) Truncate(size int64) error {
	if size >= 0 {
		if err := f.e.maybeError(Op{Kind: OpWrite, Path: f.path}, f.usable); err != nil {
			return f.fail("truncate", err)
		}
	}
	return f.File.Truncate(size)
}

func (f *errorFile) Allocate(size int64) error {
	if size >= 0 {
		if err := f.e.maybeError(Op{Kind: OpWrite, Path: f.path}, f.usable); err != nil {
			return f.fail("allocate", err)
		}
	}
	return f.File.Allocate(size)
}

func (f *errorFile) Sync() error {
	if err := f.e.maybeError(Op{Kind: OpSync, Path: f.path}, f.usable); err != nil {
		return f.fail("sync", err)
	}
	return f.File.Sync()
}
