package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// newDurable returns a Mem with a durable, synced file at name holding data.
func newDurable(t *testing.T, name string, data []byte) (*Mem, File) {
	t.Helper()
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d"))
	require.NoError(t, m.SyncDir("/"))
	f, err := m.Create(name)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("/d"))
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	return m, f
}

func exists(t *testing.T, m *Mem, name string) bool {
	t.Helper()
	_, err := m.Stat(name)
	if err != nil {
		require.ErrorIs(t, err, fs.ErrNotExist)
	}
	return err == nil
}

func TestMemUnsyncedDataLost(t *testing.T) {
	m, f := newDurable(t, "/d/f", []byte("abc"))
	_, err := f.WriteAt([]byte("def"), 3)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("X"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(2))
	m.CrashClean()
	require.Equal(t, "abc", content(t, m, "/d/f"))
}

func TestMemSyncedDataKept(t *testing.T) {
	m, f := newDurable(t, "/d/f", []byte("abc"))
	_, err := f.WriteAt([]byte("def"), 3)
	require.NoError(t, err)
	require.NoError(t, f.Allocate(10))
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("lost"), 0)
	require.NoError(t, err)
	m.CrashClean()
	require.Equal(t, []byte("abcdef\x00\x00\x00\x00"), []byte(content(t, m, "/d/f")))
}

// memOp is one change to a file, applied both to Mem and to a model.
type memOp struct {
	kind string // "write", "truncate", "allocate"
	off  int64  // write offset, or size
	data []byte
}

func (op memOp) apply(model []byte) []byte {
	switch op.kind {
	case "write":
		if end := op.off + int64(len(op.data)); end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		copy(model[op.off:], op.data)
	case "truncate":
		if op.off < int64(len(model)) {
			return model[:op.off]
		}
		return append(model, make([]byte, op.off-int64(len(model)))...)
	case "allocate":
		if op.off > int64(len(model)) {
			return append(model, make([]byte, op.off-int64(len(model)))...)
		}
	}
	return model
}

// matchTorn reports whether got is before with a non-empty proper prefix
// of write op applied. Write data has no zero bytes, so a tear that extends
// the file is identified by the size, and any other by the longest prefix of
// the write found in got.
func matchTorn(before, got []byte, op memOp) (kept int64, ok bool) {
	if op.kind != "write" {
		return 0, false
	}
	kept = int64(len(got)) - op.off
	if len(got) <= len(before) {
		kept = 0
		for kept < int64(len(op.data)) && op.off+kept < int64(len(got)) && got[op.off+kept] == op.data[kept] {
			kept++
		}
	}
	if kept < 1 || kept >= int64(len(op.data)) {
		return 0, false
	}
	want := memOp{kind: "write", off: op.off, data: op.data[:kept]}.apply(bytes.Clone(before))
	return kept, bytes.Equal(got, want)
}

// TestMemCrashKeepsPrefix checks, over many seeds, that a crash leaves each
// file as its durable state plus an in-order prefix of the unsynced changes,
// the last possibly torn, and that every kind of outcome does occur.
func TestMemCrashKeepsPrefix(t *testing.T) {
	var none, all, partial, torn, sectorTorn int
	for seed := range uint64(1500) {
		gen := rand.New(rand.NewPCG(seed, 1))
		initial := make([]byte, 1+gen.IntN(3000))
		for i := range initial {
			initial[i] = byte(gen.Uint32())
		}
		m, f := newDurable(t, "/d/f", initial)
		var ops []memOp
		for range 1 + gen.IntN(8) {
			op := memOp{kind: "write", off: int64(gen.IntN(5000))}
			switch gen.IntN(8) {
			case 0:
				op = memOp{kind: "truncate", off: int64(gen.IntN(6000))}
				require.NoError(t, f.Truncate(op.off))
			case 1:
				op = memOp{kind: "allocate", off: int64(gen.IntN(8000))}
				require.NoError(t, f.Allocate(op.off))
			default:
				op.data = make([]byte, 1+gen.IntN(1500))
				for i := range op.data {
					op.data[i] = byte(gen.Uint32()) | 1 // never a zero-fill byte
				}
				_, err := f.WriteAt(op.data, op.off)
				require.NoError(t, err)
			}
			ops = append(ops, op)
		}
		m.Crash(rand.New(rand.NewPCG(seed, 2)))
		got := []byte(content(t, m, "/d/f"))

		state, ok := bytes.Clone(initial), false
		for k := 0; k <= len(ops) && !ok; k++ {
			if bytes.Equal(got, state) {
				ok = true
				switch k {
				case 0:
					none++
				case len(ops):
					all++
				default:
					partial++
				}
				break
			}
			if k == len(ops) {
				break
			}
			if kept, isTorn := matchTorn(state, got, ops[k]); isTorn {
				ok = true
				torn++
				if (ops[k].off+kept)%512 == 0 {
					sectorTorn++
				}
				break
			}
			state = ops[k].apply(state)
		}
		require.True(t, ok, "seed %d: crash state is not a prefix of the writes", seed)
	}
	t.Logf("none=%d all=%d partial=%d torn=%d (at sector %d)", none, all, partial, torn, sectorTorn)
	for _, n := range []int{none, all, partial, torn, sectorTorn} {
		require.Positive(t, n)
	}
}

func TestMemCrashDeterministic(t *testing.T) {
	run := func() (string, []string) {
		m, f := newDurable(t, "/d/f", []byte("base"))
		for i := range 20 {
			_, err := f.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 700), int64(i*300))
			require.NoError(t, err)
		}
		g, err := m.Create("/d/g")
		require.NoError(t, err)
		_, err = g.WriteAt([]byte("gggg"), 0)
		require.NoError(t, err)
		require.NoError(t, m.SyncDir("/d"))
		m.Crash(rand.New(rand.NewPCG(42, 42)))
		names, err := m.List("/d")
		require.NoError(t, err)
		return content(t, m, "/d/f") + "|" + content(t, m, "/d/g"), names
	}
	c1, n1 := run()
	c2, n2 := run()
	require.Equal(t, c1, c2)
	require.Equal(t, n1, n2)
}

func TestMemDirOps(t *testing.T) {
	t.Run("CreateNeedsSyncDir", func(t *testing.T) {
		m, _ := newDurable(t, "/d/f", []byte("f"))
		g, err := m.Create("/d/g")
		require.NoError(t, err)
		_, err = g.WriteAt([]byte("data"), 0)
		require.NoError(t, err)
		require.NoError(t, g.Sync()) // data durable, entry not
		m.CrashClean()
		require.False(t, exists(t, m, "/d/g"))
		names, err := m.List("/d")
		require.NoError(t, err)
		require.Equal(t, []string{"f"}, names)
	})
	t.Run("SyncedCreateKeepsEntryNotData", func(t *testing.T) {
		m, _ := newDurable(t, "/d/f", []byte("f"))
		g, err := m.Create("/d/g")
		require.NoError(t, err)
		require.NoError(t, m.SyncDir("/d"))
		_, err = g.WriteAt([]byte("data"), 0)
		require.NoError(t, err)
		m.CrashClean()
		require.Equal(t, "", content(t, m, "/d/g"))
	})
	t.Run("RenameUndone", func(t *testing.T) {
		m, _ := newDurable(t, "/d/a", []byte("A"))
		write(t, m, "/d/b", "B")
		b, err := m.Open("/d/b")
		require.NoError(t, err)
		require.NoError(t, b.Sync())
		require.NoError(t, m.SyncDir("/d"))
		require.NoError(t, m.Rename("/d/a", "/d/b"))
		m.CrashClean()
		require.Equal(t, "A", content(t, m, "/d/a"))
		require.Equal(t, "B", content(t, m, "/d/b"))
	})
	t.Run("RenameSynced", func(t *testing.T) {
		m, _ := newDurable(t, "/d/a", []byte("A"))
		require.NoError(t, m.Rename("/d/a", "/d/b"))
		require.NoError(t, m.SyncDir("/d"))
		m.CrashClean()
		require.False(t, exists(t, m, "/d/a"))
		require.Equal(t, "A", content(t, m, "/d/b"))
	})
	t.Run("RemoveUndone", func(t *testing.T) {
		m, f := newDurable(t, "/d/a", []byte("A"))
		_, err := f.WriteAt([]byte("unsynced"), 0)
		require.NoError(t, err)
		require.NoError(t, m.Remove("/d/a"))
		m.CrashClean()
		require.Equal(t, "A", content(t, m, "/d/a"))
	})
	t.Run("RemoveSynced", func(t *testing.T) {
		m, _ := newDurable(t, "/d/a", []byte("A"))
		require.NoError(t, m.Remove("/d/a"))
		require.NoError(t, m.SyncDir("/d"))
		require.Empty(t, m.files) // nothing can bring it back
		m.CrashClean()
		require.False(t, exists(t, m, "/d/a"))
	})
	t.Run("Mkdir", func(t *testing.T) {
		m := NewMem()
		require.NoError(t, m.MkdirAll("/x/y"))
		write(t, m, "/x/y/f", "f")
		require.NoError(t, m.SyncDir("/x/y"))
		require.NoError(t, m.SyncDir("/x"))
		m.CrashClean() // "/" was never synced: everything under it goes
		require.False(t, exists(t, m, "/x"))

		require.NoError(t, m.MkdirAll("/x/y"))
		require.NoError(t, m.SyncDir("/"))
		m.CrashClean()
		require.True(t, exists(t, m, "/x"))
		require.False(t, exists(t, m, "/x/y"))
	})
}

func TestMemHandlesInvalidAfterCrash(t *testing.T) {
	m, f := newDurable(t, "/d/f", []byte("abc"))
	m.CrashClean()
	buf := make([]byte, 3)
	_, err := f.ReadAt(buf, 0)
	require.ErrorIs(t, err, ErrCrashed)
	_, err = f.WriteAt(buf, 0)
	require.ErrorIs(t, err, ErrCrashed)
	_, err = f.Size()
	require.ErrorIs(t, err, ErrCrashed)
	require.ErrorIs(t, f.Truncate(0), ErrCrashed)
	require.ErrorIs(t, f.Allocate(10), ErrCrashed)
	require.ErrorIs(t, f.Sync(), ErrCrashed)
	require.ErrorIs(t, f.DropCache(0, 1), ErrCrashed)
	require.ErrorIs(t, f.Prefetch(0, 1), ErrCrashed)
	require.NoError(t, f.Close())
	require.ErrorIs(t, f.Close(), fs.ErrClosed)
	require.Equal(t, "abc", content(t, m, "/d/f"))
}

func TestMemCapacity(t *testing.T) {
	m := NewMem()
	m.SetCapacity(1000)
	free, err := m.FreeSpace("/")
	require.NoError(t, err)
	require.EqualValues(t, 1000, free)

	f, err := m.Create("/f")
	require.NoError(t, err)
	require.NoError(t, f.Allocate(600))
	free, err = m.FreeSpace("/")
	require.NoError(t, err)
	require.EqualValues(t, 400, free)

	g, err := m.Create("/g")
	require.NoError(t, err)
	_, err = g.WriteAt(make([]byte, 500), 0)
	require.ErrorIs(t, err, ErrNoSpace)
	require.ErrorIs(t, g.Truncate(401), ErrNoSpace)
	require.ErrorIs(t, f.Allocate(1001), ErrNoSpace)
	size, err := g.Size()
	require.NoError(t, err)
	require.Zero(t, size)

	// Writes inside an allocation cannot run out of space.
	_, err = f.WriteAt(make([]byte, 600), 0)
	require.NoError(t, err)
	_, err = g.WriteAt(make([]byte, 400), 0)
	require.NoError(t, err)

	require.NoError(t, m.Remove("/f"))
	free, err = m.FreeSpace("/")
	require.NoError(t, err)
	require.EqualValues(t, 600, free)
	require.NoError(t, m.Rename("/g", "/h"))
	free, err = m.FreeSpace("/")
	require.NoError(t, err)
	require.EqualValues(t, 600, free)

	m.CrashClean() // nothing was made durable
	free, err = m.FreeSpace("/")
	require.NoError(t, err)
	require.EqualValues(t, 1000, free)
}

func TestMemStats(t *testing.T) {
	m, f := newDurable(t, "/d/f", []byte("abc")) // 1 write, 1 sync, 2 syncdirs
	_, err := f.WriteAt([]byte("de"), 3)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.Equal(t, MemStats{Syncs: 2, SyncDirs: 2, Writes: 2, BytesWritten: 5}, m.Stats())
}

// TestMemConcurrentCrash exercises the locking: writers race a crash, and
// must see either success or ErrCrashed.
func TestMemConcurrentCrash(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d"))
	var wg sync.WaitGroup
	for i := range 4 {
		f, err := m.Create(fmt.Sprint("/d/f", i))
		require.NoError(t, err)
		wg.Go(func() {
			for j := range 200 {
				if _, err := f.WriteAt([]byte("data"), int64(j*4)); err != nil {
					if !assertErrorIs(t, err, ErrCrashed) {
						return
					}
				}
				_ = f.Sync()
			}
		})
	}
	wg.Go(func() { m.Crash(rand.New(rand.NewPCG(1, 1))) })
	wg.Wait()
}

func assertErrorIs(t *testing.T, err, target error) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("got %v, want %v", err, target)
		return false
	}
	return true
}

func TestMemFlipBit(t *testing.T) {
	m, f := newDurable(t, "/d/f", []byte("abcd"))
	// An unsynced overwrite of byte 1 and an unsynced growth.
	_, err := f.WriteAt([]byte("XY"), 1)
	require.NoError(t, err)
	require.NoError(t, m.FlipBit("/d/f", 1, 0)) // X (0x58) -> Y (0x59) now, b -> c durably
	require.NoError(t, m.FlipBit("d/f", 3, 1))  // d (0x64) -> f (0x66), never rewritten
	buf := make([]byte, 4)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "aYYf", string(buf))
	require.Equal(t, int64(2), m.Stats().BitFlips)

	m.CrashClean() // the durable version carries the flips too
	g, err := m.Open("/d/f")
	require.NoError(t, err)
	_, err = g.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "accf", string(buf))

	require.ErrorIs(t, m.FlipBit("/d/f", 4, 0), syscall.EINVAL)
	require.ErrorIs(t, m.FlipBit("/d/f", 0, 8), syscall.EINVAL)
	require.ErrorIs(t, m.FlipBit("/d/none", 0, 0), fs.ErrNotExist)
	require.ErrorIs(t, m.FlipBit("/d", 0, 0), syscall.EISDIR)
}

func TestMemFlipBitSurvivesAnyCrash(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		m, f := newDurable(t, "/d/f", bytes.Repeat([]byte{0}, 1024))
		for i := 0; i < 4; i++ {
			_, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 100), int64(i*200))
			require.NoError(t, err)
		}
		require.NoError(t, m.FlipBit("/d/f", 1000, 7)) // never written since the sync
		require.NoError(t, m.FlipBit("/d/f", 250, 0))  // overwritten by a pending write
		m.Crash(rand.New(rand.NewPCG(seed, 1)))
		g, err := m.Open("/d/f")
		require.NoError(t, err)
		buf := make([]byte, 1024)
		_, err = g.ReadAt(buf, 0)
		require.NoError(t, err)
		require.Equal(t, byte(0x80), buf[1000])
		require.Contains(t, []byte{0x01, 0x03}, buf[250], "either the durable zero or the pending 2, flipped")
	}
}
