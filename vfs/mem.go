package vfs

import (
	"errors"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// ErrCrashed is returned by a File of a Mem that crashed after the File was
// opened: the process it belonged to is gone.
var ErrCrashed = errors.New("vfs: file handle from before a crash")

// Mem is an in-memory FS that tracks what a power loss would keep, so crash
// tests and the simulator can check recovery against the real contract:
// only Sync makes file data durable, and only SyncDir makes a directory
// entry (create, rename, remove, mkdir) durable. Mem is the medium: its
// faults are the medium's (power loss, a full disk, bit flips); a failing
// device (EIO, misdirected writes) is ErrorFS, wrapped around it.
//
// Paths are cleaned and rooted: "a/b" and "/a/b" name the same file. Mem is
// safe for concurrent use, and given the same calls in the same order and
// the same random stream, it ends in the same state.
type Mem struct {
	mu   sync.Mutex
	root *memNode
	// files holds every file inode a crash could bring back, in creation
	// order, so Crash draws random numbers in a reproducible order.
	files    []*memNode
	gen      uint64 // bumped by a crash; handles of older generations are dead
	used     int64  // sum of the sizes of linked files
	capacity int64  // 0: unlimited
	stats    MemStats
}

// MemStats counts successful operations, so tests can assert on IO cost.
type MemStats struct {
	Syncs        int64 // File.Sync
	SyncDirs     int64
	Writes       int64 // File.WriteAt
	BytesWritten int64
	BitFlips     int64 // FlipBit
}

// memNode is a directory or a file inode.
type memNode struct {
	dir bool

	// Directory: the entries now, and as of the last SyncDir.
	entries, durable map[string]*memNode

	// File: current content, and how to undo each change since the last
	// Sync. Keeping undo records rather than a durable copy costs memory
	// only for unsynced bytes, and makes Sync free.
	data    []byte
	pending []undoRec
	nlink   int // entries naming it now
	dlink   int // durable entries naming it
}

// undoRec restores a file to its state before one write, truncate or
// allocate: size oldSize, and old at off (old lies within oldSize).
type undoRec struct {
	off     int64
	n       int64 // bytes written; 0 for size changes, which cannot tear
	oldSize int64
	old     []byte
}

// unlimited is what FreeSpace reports with no capacity set.
const unlimited = math.MaxInt64

// NewMem returns an empty Mem with only the root directory and unlimited
// space.
func NewMem() *Mem {
	return &Mem{root: newDir()}
}

var _ FS = (*Mem)(nil)

func newDir() *memNode {
	return &memNode{dir: true, entries: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// SetCapacity makes growing files fail with ErrNoSpace once the total size
// of all files would exceed bytes. 0 means unlimited. Writes inside a file's
// current size never fail, which is what Allocate is for.
func (m *Mem) SetCapacity(bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capacity = bytes
}

// FlipBit flips bit (0-7) of the byte at off of the file name: silent
// corruption of the medium, the way a real disk rots. The byte is damaged
// in the current content and in every earlier version a crash could bring
// back, the durable one included: whatever a later Crash keeps, the bit
// stays flipped (unless a later write overwrites the byte). off must lie
// within the current size. Nothing else changes: no error is reported to
// anyone reading the file, no write is pending.
func (m *Mem) FlipBit(name string, off int64, bit uint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookup(clean(name))
	switch {
	case n == nil:
		return &fs.PathError{Op: "flipbit", Path: name, Err: fs.ErrNotExist}
	case n.dir:
		return &fs.PathError{Op: "flipbit", Path: name, Err: syscall.EISDIR}
	case off < 0 || off >= int64(len(n.data)) || bit > 7:
		return &fs.PathError{Op: "flipbit", Path: name, Err: syscall.EINVAL}
	}
	mask := byte(1) << bit
	n.data[off] ^= mask
	for _, u := range n.pending {
		if u.off <= off && off < u.off+int64(len(u.old)) {
			u.old[off-u.off] ^= mask
		}
	}
	m.stats.BitFlips++
	return nil
}

// Stats returns the operation counters.
func (m *Mem) Stats() MemStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// Crash simulates power loss. Each file keeps its durable content plus a
// prefix, drawn from r, of its unsynced changes in the order they were made;
// the last kept write may be torn, usually at a 512-byte sector boundary.
// Directory changes not made durable by SyncDir are undone. All open Files
// become invalid.
func (m *Mem) Crash(r *rand.Rand) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crash(r)
}

// CrashClean simulates power loss that keeps exactly the durable state.
func (m *Mem) CrashClean() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crash(nil)
}

func (m *Mem) crash(r *rand.Rand) {
	for _, f := range m.files {
		f.crashData(r)
		f.nlink, f.dlink = 0, 0
	}
	// Rebuild the namespace from the durable entries reachable from the
	// root. The walk order is irrelevant: it only counts.
	seen := map[*memNode]bool{}
	var walk func(d *memNode)
	walk = func(d *memNode) {
		if seen[d] {
			return
		}
		seen[d] = true
		d.entries = maps.Clone(d.durable)
		for _, n := range d.durable {
			if n.dir {
				walk(n)
			} else {
				n.nlink++
				n.dlink++
			}
		}
	}
	walk(m.root)
	m.used = 0
	m.files = slices.DeleteFunc(m.files, func(f *memNode) bool { return f.nlink == 0 })
	for _, f := range m.files {
		m.used += int64(len(f.data))
	}
	m.gen++
}

func (n *memNode) crashData(r *rand.Rand) {
	p := len(n.pending)
	if p == 0 {
		return
	}
	keep, torn := 0, int64(0)
	if r != nil {
		keep = r.IntN(p + 1)
		if keep < p && n.pending[keep].n > 1 {
			torn = tear(r, n.pending[keep].off, n.pending[keep].n)
		}
	}
	for i := p - 1; i > keep; i-- {
		n.undo(n.pending[i], 0)
	}
	if keep < p {
		n.undo(n.pending[keep], torn)
	}
	n.pending = nil
}

// tear picks how many bytes, in [0, n), of a write at off reach the disk:
// half the time none, so clean cuts between writes stay common. Disks tear
// at sector boundaries, so those are preferred when the write spans one.
func tear(r *rand.Rand, off, n int64) int64 {
	const sector = 512
	if r.IntN(2) == 0 {
		return 0
	}
	first := (off/sector + 1) * sector // first boundary after off
	if first < off+n && r.IntN(4) != 0 {
		count := (off+n-1-first)/sector + 1
		return first + r.Int64N(count)*sector - off
	}
	return r.Int64N(n)
}

// undo reverts u, keeping its first kept bytes (0: revert all).
func (n *memNode) undo(u undoRec, kept int64) {
	if kept == 0 {
		n.resize(u.oldSize)
		if len(u.old) > 0 { // else off may lie beyond oldSize
			copy(n.data[u.off:], u.old)
		}
		return
	}
	n.resize(max(u.oldSize, u.off+kept))
	if kept < int64(len(u.old)) {
		copy(n.data[u.off+kept:], u.old[kept:])
	}
}

// resize sets the size, zero-filling growth: the slice may still hold bytes
// from before an earlier shrink.
func (n *memNode) resize(size int64) {
	if c := int64(cap(n.data)); c > 1<<16 && size < c/4 {
		n.data = slices.Clone(n.data[:min(size, int64(len(n.data)))]) // give back memory
	}
	cur := int64(len(n.data))
	if size <= cur {
		n.data = n.data[:size]
		return
	}
	n.data = slices.Grow(n.data, int(size-cur))[:size]
	clear(n.data[cur:])
}

func clean(name string) string { return path.Clean("/" + name) }

func (m *Mem) lookup(p string) *memNode {
	n := m.root
	for _, c := range strings.Split(p, "/")[1:] {
		if c == "" {
			continue
		}
		if !n.dir {
			return nil
		}
		if n = n.entries[c]; n == nil {
			return nil
		}
	}
	return n
}

// parent finds the directory that holds name's entry.
func (m *Mem) parent(op, name string) (*memNode, string, error) {
	p := clean(name)
	if p == "/" {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: syscall.EINVAL}
	}
	d := m.lookup(path.Dir(p))
	if d == nil {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if !d.dir {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return d, path.Base(p), nil
}

func (m *Mem) link(n *memNode) {
	if n.nlink++; n.nlink == 1 {
		m.used += int64(len(n.data))
	}
}

func (m *Mem) unlink(n *memNode) {
	if n.nlink--; n.nlink == 0 {
		m.used -= int64(len(n.data))
		m.forgetIfGone(n)
	}
}

// forgetIfGone drops a file no crash can bring back. Open handles keep
// working on it.
func (m *Mem) forgetIfGone(n *memNode) {
	if n.nlink == 0 && n.dlink == 0 {
		if i := slices.Index(m.files, n); i >= 0 {
			m.files = slices.Delete(m.files, i, i+1)
		}
	}
}

// Create implements FS.
func (m *Mem) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("create", name)
	if err != nil {
		return nil, err
	}
	n := d.entries[base]
	switch {
	case n == nil:
		n = &memNode{}
		d.entries[base] = n
		m.link(n)
		m.files = append(m.files, n)
	case n.dir:
		return nil, &fs.PathError{Op: "create", Path: name, Err: syscall.EISDIR}
	default:
		m.setSize(n, 0)
	}
	return m.handle(n, name), nil
}

// Open implements FS.
func (m *Mem) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookup(clean(name))
	if n == nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	return m.handle(n, name), nil
}

func (m *Mem) handle(n *memNode, name string) *memFile {
	return &memFile{m: m, n: n, name: name, gen: m.gen}
}

// Rename implements FS. Replacing a directory is not supported.
func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fail := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	od, ob, err := m.parent("rename", oldname)
	if err != nil {
		return fail(err.(*fs.PathError).Err)
	}
	n := od.entries[ob]
	if n == nil {
		return fail(fs.ErrNotExist)
	}
	nd, nb, err := m.parent("rename", newname)
	if err != nil {
		return fail(err.(*fs.PathError).Err)
	}
	target := nd.entries[nb]
	switch {
	case target == n:
		return nil
	case target != nil && target.dir:
		return fail(syscall.EISDIR)
	case target != nil && n.dir:
		return fail(syscall.ENOTDIR)
	case n.dir && strings.HasPrefix(clean(newname), clean(oldname)+"/"):
		return fail(syscall.EINVAL)
	}
	nd.entries[nb] = n
	delete(od.entries, ob)
	if target != nil {
		m.unlink(target)
	}
	return nil
}

// Remove implements FS.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	n := d.entries[base]
	switch {
	case n == nil:
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	case n.dir && len(n.entries) > 0:
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(d.entries, base)
	if !n.dir {
		m.unlink(n)
	}
	return nil
}

// MkdirAll implements FS.
func (m *Mem) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.root
	for _, c := range strings.Split(clean(dir), "/")[1:] {
		if c == "" {
			continue
		}
		child := d.entries[c]
		if child == nil {
			child = newDir()
			d.entries[c] = child
		} else if !child.dir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		d = child
	}
	return nil
}

func (m *Mem) dir(op, name string) (*memNode, error) {
	d := m.lookup(clean(name))
	if d == nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if !d.dir {
		return nil, &fs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return d, nil
}

// List implements FS.
func (m *Mem) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir("readdir", dir)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(d.entries)), nil
}

// Stat implements FS. Directories have size 0.
func (m *Mem) Stat(name string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.lookup(clean(name))
	if n == nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return int64(len(n.data)), nil
}

// SyncDir implements FS.
func (m *Mem) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir("sync", dir)
	if err != nil {
		return err
	}
	old := d.durable
	d.durable = maps.Clone(d.entries)
	for _, n := range d.durable {
		if !n.dir {
			n.dlink++
		}
	}
	for _, n := range old {
		if !n.dir {
			n.dlink--
			m.forgetIfGone(n)
		}
	}
	m.stats.SyncDirs++
	return nil
}

// FreeSpace implements FS: capacity minus the size of all files, or
// math.MaxInt64 with no capacity set.
func (m *Mem) FreeSpace(dir string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.dir("statfs", dir); err != nil {
		return 0, err
	}
	if m.capacity == 0 {
		return unlimited, nil
	}
	return uint64(max(m.capacity-m.used, 0)), nil
}

// grow checks that n may grow to size.
func (m *Mem) grow(n *memNode, size int64) bool {
	delta := size - int64(len(n.data))
	return delta <= 0 || m.capacity == 0 || n.nlink == 0 || m.used+delta <= m.capacity
}

// setSize truncates or extends n, recording how to undo it.
func (m *Mem) setSize(n *memNode, size int64) {
	cur := int64(len(n.data))
	if size == cur {
		return
	}
	u := undoRec{off: min(size, cur), oldSize: cur}
	if size < cur {
		u.old = slices.Clone(n.data[size:])
	}
	n.pending = append(n.pending, u)
	m.resize(n, size)
}

func (m *Mem) resize(n *memNode, size int64) {
	if n.nlink > 0 {
		m.used += size - int64(len(n.data))
	}
	n.resize(size)
}
