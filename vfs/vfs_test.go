package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// implementations runs the conformance suite against every FS, so Mem can
// stand in for the disk only where it behaves like OS.
var implementations = []struct {
	name string
	new  func(t *testing.T) (FS, string) // file system and a root dir in it
}{
	{"OS", func(t *testing.T) (FS, string) { return OS{}, t.TempDir() }},
	{"Lazy", func(t *testing.T) (FS, string) {
		root := t.TempDir()
		l, err := NewLazy(root, path.Join(t.TempDir(), "backup"))
		require.NoError(t, err)
		return l, root
	}},
	{"Mem", func(t *testing.T) (FS, string) {
		m := NewMem()
		require.NoError(t, m.MkdirAll("/tmp/x"))
		return m, "/tmp/x"
	}},
	{"ErrorFS", func(t *testing.T) (FS, string) {
		m := NewMem()
		require.NoError(t, m.MkdirAll("/tmp/x"))
		return NewErrorFS(m), "/tmp/x"
	}},
}

func TestConformance(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) {
					fsys, root := impl.new(t)
					tc.fn(t, fsys, root)
				})
			}
		})
	}
}

func readAll(t *testing.T, f File) []byte {
	t.Helper()
	size, err := f.Size()
	require.NoError(t, err)
	buf := make([]byte, size)
	n, err := f.ReadAt(buf, 0)
	if err != io.EOF {
		require.NoError(t, err)
	}
	require.Equal(t, int(size), n)
	return buf
}

func write(t *testing.T, fsys FS, name, data string) {
	t.Helper()
	f, err := fsys.Create(name)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(data), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func content(t *testing.T, fsys FS, name string) string {
	t.Helper()
	f, err := fsys.Open(name)
	require.NoError(t, err)
	defer f.Close()
	return string(readAll(t, f))
}

var conformance = []struct {
	name string
	fn   func(t *testing.T, fsys FS, root string)
}{
	{"WriteReadAt", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "f")
		f, err := fsys.Create(name)
		require.NoError(t, err)
		defer f.Close()
		require.Equal(t, name, f.Name())

		n, err := f.WriteAt([]byte("hello world"), 0)
		require.NoError(t, err)
		require.Equal(t, 11, n)
		_, err = f.WriteAt([]byte("WORLD"), 6)
		require.NoError(t, err)

		buf := make([]byte, 5)
		n, err = f.ReadAt(buf, 6)
		require.NoError(t, err)
		require.Equal(t, "WORLD", string(buf[:n]))

		// Short read at the end reports io.EOF, like os.File.
		buf = make([]byte, 8)
		n, err = f.ReadAt(buf, 8)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, "RLD", string(buf[:n]))
		n, err = f.ReadAt(buf, 100)
		require.ErrorIs(t, err, io.EOF)
		require.Zero(t, n)

		_, err = f.ReadAt(buf, -1)
		require.Error(t, err)
		_, err = f.WriteAt(buf, -1)
		require.Error(t, err)

		size, err := f.Size()
		require.NoError(t, err)
		require.EqualValues(t, 11, size)
	}},
	{"WriteBeyondEndZeroFills", func(t *testing.T, fsys FS, root string) {
		f, err := fsys.Create(path.Join(root, "f"))
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte("ab"), 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("cd"), 6)
		require.NoError(t, err)
		require.Equal(t, []byte("ab\x00\x00\x00\x00cd"), readAll(t, f))
	}},
	{"Truncate", func(t *testing.T, fsys FS, root string) {
		f, err := fsys.Create(path.Join(root, "f"))
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte("abcdefgh"), 0)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(3))
		require.Equal(t, "abc", string(readAll(t, f)))
		// Growing again must not resurrect the cut bytes.
		require.NoError(t, f.Truncate(6))
		require.Equal(t, []byte("abc\x00\x00\x00"), readAll(t, f))
		require.NoError(t, f.Truncate(0))
		require.Empty(t, readAll(t, f))
	}},
	{"Allocate", func(t *testing.T, fsys FS, root string) {
		f, err := fsys.Create(path.Join(root, "f"))
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte("xy"), 0)
		require.NoError(t, err)
		require.NoError(t, f.Allocate(0))
		require.NoError(t, f.Allocate(8192))
		size, err := f.Size()
		require.NoError(t, err)
		require.EqualValues(t, 8192, size)
		got := readAll(t, f)
		require.Equal(t, "xy", string(got[:2]))
		require.Equal(t, make([]byte, 8190), got[2:])
		// Allocate never shrinks.
		require.NoError(t, f.Allocate(100))
		size, err = f.Size()
		require.NoError(t, err)
		require.EqualValues(t, 8192, size)
		// Writes inside the allocation do not change the size.
		_, err = f.WriteAt([]byte("z"), 4000)
		require.NoError(t, err)
		size, err = f.Size()
		require.NoError(t, err)
		require.EqualValues(t, 8192, size)
	}},
	{"SyncAndCacheHints", func(t *testing.T, fsys FS, root string) {
		f, err := fsys.Create(path.Join(root, "f"))
		require.NoError(t, err)
		_, err = f.WriteAt(bytes.Repeat([]byte("a"), 10000), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.DropCache(0, 8192))
		require.NoError(t, f.Prefetch(0, 10000))
		require.NoError(t, fsys.SyncDir(root))
		require.NoError(t, f.Close())
		require.Equal(t, 10000, len(content(t, fsys, path.Join(root, "f"))))
	}},
	{"CreateTruncatesExisting", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "f")
		write(t, fsys, name, "long content")
		write(t, fsys, name, "new")
		require.Equal(t, "new", content(t, fsys, name))
	}},
	{"OpenExisting", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "f")
		write(t, fsys, name, "abc")
		f, err := fsys.Open(name)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("X"), 1) // opened read-write
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.Equal(t, "aXc", content(t, fsys, name))
	}},
	{"NotExist", func(t *testing.T, fsys FS, root string) {
		missing := path.Join(root, "missing")
		_, err := fsys.Open(missing)
		require.ErrorIs(t, err, fs.ErrNotExist)
		_, err = fsys.Create(path.Join(missing, "f"))
		require.ErrorIs(t, err, fs.ErrNotExist)
		_, err = fsys.Stat(missing)
		require.ErrorIs(t, err, fs.ErrNotExist)
		_, err = fsys.List(missing)
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.ErrorIs(t, fsys.Remove(missing), fs.ErrNotExist)
		require.ErrorIs(t, fsys.Rename(missing, path.Join(root, "x")), fs.ErrNotExist)
		require.Error(t, fsys.SyncDir(missing))
	}},
	{"Stat", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "f")
		write(t, fsys, name, "12345")
		size, err := fsys.Stat(name)
		require.NoError(t, err)
		require.EqualValues(t, 5, size)
	}},
	{"MkdirAllAndList", func(t *testing.T, fsys FS, root string) {
		require.NoError(t, fsys.MkdirAll(path.Join(root, "a/b/c")))
		require.NoError(t, fsys.MkdirAll(path.Join(root, "a/b/c"))) // idempotent
		for _, n := range []string{"z", "m", "b0", "a0"} {
			write(t, fsys, path.Join(root, "a", n), n)
		}
		names, err := fsys.List(path.Join(root, "a"))
		require.NoError(t, err)
		require.Equal(t, []string{"a0", "b", "b0", "m", "z"}, names)
		names, err = fsys.List(path.Join(root, "a/b/c"))
		require.NoError(t, err)
		require.Empty(t, names)
		require.NoError(t, fsys.SyncDir(path.Join(root, "a")))
		// A file where a directory is wanted.
		require.Error(t, fsys.MkdirAll(path.Join(root, "a/z/q")))
	}},
	{"Rename", func(t *testing.T, fsys FS, root string) {
		a, b := path.Join(root, "a"), path.Join(root, "b")
		write(t, fsys, a, "A")
		write(t, fsys, b, "B")
		require.NoError(t, fsys.Rename(a, b))
		require.Equal(t, "A", content(t, fsys, b))
		_, err := fsys.Stat(a)
		require.ErrorIs(t, err, fs.ErrNotExist)
		names, err := fsys.List(root)
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, names)
		// Across directories.
		require.NoError(t, fsys.MkdirAll(path.Join(root, "d")))
		require.NoError(t, fsys.Rename(b, path.Join(root, "d/c")))
		require.Equal(t, "A", content(t, fsys, path.Join(root, "d/c")))
	}},
	{"Remove", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "d/f")
		require.NoError(t, fsys.MkdirAll(path.Join(root, "d")))
		write(t, fsys, name, "x")
		require.Error(t, fsys.Remove(path.Join(root, "d")), "directory not empty")
		require.NoError(t, fsys.Remove(name))
		_, err := fsys.Stat(name)
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.NoError(t, fsys.Remove(path.Join(root, "d")))
		names, err := fsys.List(root)
		require.NoError(t, err)
		require.Empty(t, names)
	}},
	{"OpenHandleSurvivesRemove", func(t *testing.T, fsys FS, root string) {
		name := path.Join(root, "f")
		write(t, fsys, name, "keep")
		f, err := fsys.Open(name)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, fsys.Remove(name))
		require.Equal(t, "keep", string(readAll(t, f)))
	}},
	{"FreeSpace", func(t *testing.T, fsys FS, root string) {
		free, err := fsys.FreeSpace(root)
		require.NoError(t, err)
		require.Positive(t, free)
	}},
	{"ConcurrentFiles", func(t *testing.T, fsys FS, root string) {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				name := path.Join(root, fmt.Sprint("f", i))
				f, err := fsys.Create(name)
				if !assertNoError(t, err) {
					return
				}
				defer f.Close()
				for j := range 50 {
					_, err := f.WriteAt([]byte{byte(j)}, int64(j))
					assertNoError(t, err)
					assertNoError(t, f.Sync())
				}
				assertNoError(t, fsys.SyncDir(root))
			})
		}
		wg.Wait()
		names, err := fsys.List(root)
		require.NoError(t, err)
		require.Len(t, names, 4)
	}},
}

// assertNoError is for goroutines, where require's FailNow is not allowed.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestOSErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		kind  error
	}{{syscall.ENOSPC, ErrNoSpace}, {syscall.EDQUOT, ErrNoSpace}, {syscall.EIO, ErrIO}} {
		orig := &fs.PathError{Op: "write", Path: "/x", Err: tc.errno}
		err := mapErr(orig)
		require.ErrorIs(t, err, tc.kind)
		require.ErrorIs(t, err, tc.errno)
		require.Equal(t, orig.Error(), err.Error())
	}
	orig := &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}
	require.Same(t, orig, mapErr(orig))
	require.NoError(t, mapErr(nil))
	require.False(t, errors.Is(mapErr(orig), ErrIO))
}

// ReplaceFile leaves exactly the new contents, also over a longer old file
// and a leftover temporary file, and they survive a crash.
func TestReplaceFile(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d"))
	require.NoError(t, m.SyncDir("/"))
	require.NoError(t, ReplaceFile(m, "/d", "f", []byte("a longer first version")))
	w, err := m.Create("/d/f.tmp") // a leftover of an interrupted call
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("garbage garbage garbage garbage"), 0)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, ReplaceFile(m, "/d", "f", []byte("second")))
	m.CrashClean()
	f, err := m.Open("/d/f")
	require.NoError(t, err)
	defer f.Close()
	size, err := m.Stat("/d/f")
	require.NoError(t, err)
	b := make([]byte, size)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "second", string(b))
}
