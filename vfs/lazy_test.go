package vfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLazyPowerLossMatchesMem runs the same random file system operations
// on Lazy (the OS) and on Mem, cuts the power of both, and compares what
// is left: Lazy must lose exactly what Mem's crash model loses (Mem's
// model is tested on its own in mem_test.go).
func TestLazyPowerLossMatchesMem(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 7))
		root := t.TempDir()
		l, err := NewLazy(root, filepath.Join(t.TempDir(), "backup"))
		require.NoError(t, err)
		m := NewMem()
		require.NoError(t, m.MkdirAll("/r"))
		require.NoError(t, m.SyncDir("/"))
		require.NoError(t, m.SyncDir("/r")) // Lazy takes what it first sees as durable
		var trace []string
		ops := lazyOps(r, 60)
		for _, op := range ops {
			trace = append(trace, op.String())
			errL := op.apply(l, root)
			errM := op.apply(m, "/r")
			require.Equal(t, errM == nil, errL == nil, "seed %d: %s: lazy %v, mem %v\n%v", seed, op, errL, errM, trace)
		}
		require.Equal(t, tree(t, m, "/r"), tree(t, OS{}, root), "seed %d: before the power loss\n%v", seed, trace)
		require.NoError(t, l.PowerLoss())
		m.CrashClean()
		require.Equal(t, tree(t, m, "/r"), tree(t, OS{}, root), "seed %d: after the power loss\n%v", seed, trace)
		_, err = l.Create(path.Join(root, "x"))
		require.ErrorIs(t, err, ErrPowerOff)
	}
}

type lazyOp struct {
	kind   string
	a, b   string
	off, n int64
	fill   byte
}

func (o lazyOp) String() string {
	return fmt.Sprintf("%s(%s,%s,%d,%d)", o.kind, o.a, o.b, o.off, o.n)
}

// lazyOps draws n operations over a few names in two directories.
func lazyOps(r *rand.Rand, n int) []lazyOp {
	names := []string{"a", "b", "c", "d/x", "d/y"}
	pick := func() string { return names[r.IntN(len(names))] }
	kinds := []string{"create", "write", "write", "writev", "truncate", "allocate", "sync", "sync", "rename", "remove", "syncdir", "syncdir", "mkdir"}
	var ops []lazyOp
	for range n {
		ops = append(ops, lazyOp{kind: kinds[r.IntN(len(kinds))], a: pick(), b: pick(), off: r.Int64N(300), n: 1 + r.Int64N(200), fill: byte('A' + r.IntN(26))})
	}
	return ops
}

func (o lazyOp) apply(fsys FS, root string) error {
	a, b := path.Join(root, o.a), path.Join(root, o.b)
	file := func(do func(File) error) error {
		f, err := fsys.Open(a)
		if err != nil {
			return err
		}
		defer f.Close()
		return do(f)
	}
	switch o.kind {
	case "create":
		f, err := fsys.Create(a)
		if err != nil {
			return err
		}
		return f.Close()
	case "write":
		return file(func(f File) error {
			_, err := f.WriteAt(bytesOf(o.fill, o.n), o.off)
			return err
		})
	case "writev": // the same bytes in three pieces, one of them empty
		return file(func(f File) error {
			p := bytesOf(o.fill, o.n)
			return WriteAtv(f, [][]byte{p[:o.n/2], nil, p[o.n/2:]}, o.off)
		})
	case "truncate":
		return file(func(f File) error { return f.Truncate(o.off) })
	case "allocate":
		return file(func(f File) error { return f.Allocate(o.off + o.n) })
	case "sync":
		return file(func(f File) error { return f.Sync() })
	case "rename":
		return fsys.Rename(a, b)
	case "remove":
		return fsys.Remove(a)
	case "syncdir":
		return fsys.SyncDir(path.Dir(a))
	case "mkdir":
		return fsys.MkdirAll(path.Join(root, "d"))
	}
	return nil
}

func bytesOf(c byte, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// tree lists every file under root with its contents ("dir/" for a
// directory).
func tree(t *testing.T, fsys FS, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(rel string)
	walk = func(rel string) {
		names, err := fsys.List(path.Join(root, rel))
		require.NoError(t, err)
		sort.Strings(names)
		for _, n := range names {
			p := path.Join(rel, n)
			if sub, err := fsys.List(path.Join(root, p)); err == nil && sub != nil || isDir(fsys, path.Join(root, p)) {
				out[p+"/"] = ""
				walk(p)
				continue
			}
			out[p] = content(t, fsys, path.Join(root, p))
		}
	}
	walk("")
	return out
}

func isDir(fsys FS, p string) bool {
	if _, ok := fsys.(OS); ok {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}
	_, err := fsys.List(p)
	return err == nil
}
