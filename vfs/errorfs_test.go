package vfs

import (
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// newFaulty is newDurable with the file opened through an ErrorFS over
// the Mem.
func newFaulty(t *testing.T, name string, data []byte) (*Mem, *ErrorFS, File) {
	t.Helper()
	m, _ := newDurable(t, name, data)
	e := NewErrorFS(m)
	f, err := e.Open(name)
	require.NoError(t, err)
	return m, e, f
}

func TestErrorFSFaults(t *testing.T) {
	m, e, f := newFaulty(t, "/d/f", []byte("abc"))
	other, err := e.Create("/other")
	require.NoError(t, err)

	e.SetFaults(Faults{Path: "/d", FailWrites: 2, FailSyncs: 2})
	_, err = other.WriteAt([]byte("x"), 0) // filtered out
	require.NoError(t, err)
	require.NoError(t, other.Sync())

	_, err = f.WriteAt([]byte("X"), 0)
	require.ErrorIs(t, err, ErrIO)
	require.ErrorIs(t, f.Truncate(0), ErrIO)
	_, err = f.WriteAt([]byte("X"), 0) // faults used up
	require.NoError(t, err)
	require.Equal(t, "Xbc", string(readAll(t, f)))

	require.ErrorIs(t, f.Sync(), ErrIO)
	require.ErrorIs(t, e.SyncDir("/d"), ErrIO)
	require.Equal(t, Faults{Path: "/d"}, e.Faults())
	m.CrashClean() // the failed sync made nothing durable
	require.Equal(t, "abc", content(t, m, "/d/f"))
}

func TestErrorFSMisdirect(t *testing.T) {
	m, e, f := newFaulty(t, "/d/f", []byte("0123456789"))
	other, err := e.Create("/e")
	require.NoError(t, err)
	e.Misdirect("/d", 4)
	require.True(t, e.MisdirectArmed())
	_, err = other.WriteAt([]byte("zz"), 0) // outside the prefix: lands where asked
	require.NoError(t, err)
	n, err := f.WriteAt([]byte("ab"), 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.False(t, e.MisdirectArmed())
	_, err = f.WriteAt([]byte("c"), 0) // one shot: the next write is fine
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "c12345ab89", string(buf))
	require.Equal(t, int64(1), e.Misdirected())

	// A negative shift clamps at 0 and may grow nothing; a shift past the
	// end grows the file (zero-filled), as a write there would.
	e.Misdirect("", -100)
	_, err = f.WriteAt([]byte("Q"), 5)
	require.NoError(t, err)
	e.Misdirect("/d/f", 10)
	_, err = f.WriteAt([]byte("W"), 5)
	require.NoError(t, err)
	sz, err := f.Size()
	require.NoError(t, err)
	require.Equal(t, int64(16), sz)
	buf = make([]byte, 16)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "Q12345ab89\x00\x00\x00\x00\x00W", string(buf))

	// The misdirected write is pending like any other: a crash may drop it.
	require.NoError(t, f.Sync())
	e.Misdirect("/d/f", 1)
	_, err = f.WriteAt([]byte("R"), 0)
	require.NoError(t, err)
	m.CrashClean()
	g, err := e.Open("/d/f")
	require.NoError(t, err)
	_, err = g.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "Q12345ab89\x00\x00\x00\x00\x00W", string(buf))

	// A failed write does not use up the misdirection.
	e.Misdirect("/d/f", 1)
	e.SetFaults(Faults{FailWrites: 1})
	_, err = g.WriteAt([]byte("S"), 0)
	require.ErrorIs(t, err, ErrIO)
	require.True(t, e.MisdirectArmed())
	e.Misdirect("", 0)
	require.False(t, e.MisdirectArmed())
}

// TestErrorFSSparesRejectedOps: a fault fires only on an operation the
// wrapped FS would accept; a dead handle or a bad offset leaves it armed.
func TestErrorFSSparesRejectedOps(t *testing.T) {
	m, e, f := newFaulty(t, "/d/f", []byte("abc"))
	armed := Faults{FailWrites: 1, FailSyncs: 1}
	e.SetFaults(armed)
	_, err := f.WriteAt([]byte("x"), -1)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorIs(t, f.Truncate(-1), syscall.EINVAL)
	require.ErrorIs(t, e.SyncDir("/none"), fs.ErrNotExist)
	m.CrashClean()
	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, ErrCrashed)
	require.ErrorIs(t, f.Sync(), ErrCrashed)
	require.Equal(t, armed, e.Faults())
}

// TestErrorFSInjectorsCompose: injectors are asked in order, the first
// error wins, and each keeps its own count.
func TestErrorFSInjectorsCompose(t *testing.T) {
	_, e, f := newFaulty(t, "/d/f", []byte("abc"))
	e.Inject(&Faults{Path: "/d", FailSyncs: 1}, &Faults{FailSyncs: 1})
	require.ErrorIs(t, f.Sync(), ErrIO)
	require.ErrorIs(t, e.SyncDir("/"), ErrIO) // outside /d: the second one
	require.NoError(t, f.Sync())
	require.NoError(t, e.SyncDir("/d"))
}
