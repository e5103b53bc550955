package vfs

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// WriteAtv writes its pieces one after another: on an OS file with
// pwritev (more pieces than one call takes, and empty ones, included),
// on any other as one write (a fault injector counts one op).
func TestWriteAtv(t *testing.T) {
	var pieces [][]byte
	var want []byte
	for i := range 3000 {
		p := bytes.Repeat([]byte{byte(i)}, i%7) // every seventh empty
		pieces = append(pieces, p)
		want = append(want, p...)
	}
	f, err := OS{}.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, WriteAtv(f, pieces, 5))
	got := make([]byte, len(want))
	_, err = f.ReadAt(got, 5)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Len(t, pieces[1], 1, "the caller's pieces stay whole")

	_, e, g := newFaulty(t, "/d/f", nil)
	e.SetFaults(Faults{Path: "/d", FailWrites: 1})
	require.ErrorIs(t, WriteAtv(g, [][]byte{[]byte("ab"), []byte("cd")}, 0), ErrIO)
	require.NoError(t, WriteAtv(g, [][]byte{[]byte("ab"), []byte("cd")}, 0), "one write op: one fault")
	require.Equal(t, "abcd", string(readAll(t, g)))
}
