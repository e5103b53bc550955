// Package vfs is the file-system edge of VDL. The storage engine is written
// against FS alone, so the same code runs on the real disk (OS) and on the
// simulated disk (Mem), which models what survives a crash; ErrorFS wraps
// either with a failing device (injected EIO, misdirected writes).
package vfs

import (
	"errors"
	"io"
)

// ErrNoSpace and ErrIO are returned (wrapped) when the device is full or
// failing. Mem (a full disk) and ErrorFS (a failing device) inject them;
// OS maps ENOSPC/EIO onto them.
var (
	ErrNoSpace = errors.New("vfs: no space left on device")
	ErrIO      = errors.New("vfs: input/output error")
)

// FS is the set of file-system operations VDL needs. Paths are slash
// separated; directories must exist before files are created in them.
type FS interface {
	// Create creates (or truncates) a file for reading and writing.
	Create(name string) (File, error)
	// Open opens an existing file for reading and writing.
	Open(name string) (File, error)
	// Rename atomically replaces newname with oldname. It is durable only
	// after SyncDir of the directory.
	Rename(oldname, newname string) error
	// Remove deletes a file or an empty directory. Durable after SyncDir.
	Remove(name string) error
	// MkdirAll creates a directory and its parents. Durable after SyncDir
	// of the parent.
	MkdirAll(dir string) error
	// List returns the names (not paths) of a directory's entries, sorted.
	List(dir string) ([]string, error)
	// Stat returns the size of a file; fs.ErrNotExist if it is missing.
	Stat(name string) (int64, error)
	// SyncDir makes creates, renames and removes in dir durable.
	SyncDir(dir string) error
	// FreeSpace reports the bytes available to VDL on the device holding dir.
	FreeSpace(dir string) (uint64, error)
}

// File is an open file. Writes are positional: the storage engine always
// knows where a record goes, and positional IO has no hidden cursor.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Name returns the path the file was opened with.
	Name() string
	// Size returns the current file size.
	Size() (int64, error)
	// Truncate sets the file size. Durable after Sync.
	Truncate(size int64) error
	// Allocate reserves size bytes of disk for the file (fallocate), so
	// later writes inside it cannot fail with ENOSPC and do not change the
	// file's metadata. The file size becomes at least size.
	Allocate(size int64) error
	// Sync makes all written data durable (fdatasync). Only after Sync
	// returns nil is a write guaranteed to survive a crash.
	Sync() error
	// DropCache asks the OS to drop [off, off+n) from its page cache
	// (posix_fadvise DONTNEED). It is a hint for durable, clean data that
	// will not be read soon; it changes no contents.
	DropCache(off, n int64) error
	// Prefetch asks the OS to start reading [off, off+n) into its page
	// cache (posix_fadvise WILLNEED), for a read expected soon. A hint.
	Prefetch(off, n int64) error
	// ReadDirect is ReadAt past the OS page cache (O_DIRECT): it leaves
	// nothing cached, for data read once. p's memory, len(p) and off are
	// multiples of DirectAlign (AlignedBuf), or it fails with EINVAL. It
	// reads what ReadAt would; at the end of the file it returns fewer
	// bytes with io.EOF itself (not wrapped: callers compare it).
	ReadDirect(p []byte, off int64) (int, error)
}

// DataMap is implemented by files that know where their data lies
// (SEEK_DATA and SEEK_HOLE on Linux). Everything else in the file, holes
// and reserved but never written blocks, reads as zeros: a reader looking
// for records may skip it. A restart's recovery otherwise read each
// stream's whole allocation, zeros included (a gigabyte at 10,000 streams).
type DataMap interface {
	// DataAfter returns the first data region at or after off: [start,
	// end). ok is false when no data lies at or after off. It may report
	// more data than there is (a file system without the calls reports
	// all of it), never less.
	DataAfter(off int64) (start, end int64, ok bool, err error)
}
