package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Lazy is the real file system with a power switch, for real processes
// under test (the failpoint build runs servers on it): PowerLoss leaves
// the disk as a power cut would, with exactly what was made durable —
// every byte written since its file's last Sync is gone, and so is every
// create, rename, remove and mkdir since its directory's last SyncDir.
// The model is Mem's (its conformance and crash tests hold for Lazy too),
// after etcd's use of LazyFS.
//
// Until PowerLoss, everything goes to the OS at once: the process reads
// its own writes, and a process crash (kill -9) keeps them in the page
// cache as it would. To be able to undo, Lazy keeps, per file, the bytes
// each write or truncate overwrote in what was synced, and per directory
// the entries its last sync made durable; a durable file that is removed
// or renamed over stays reachable through a hard link in the backup
// directory until its directory is synced again. What is new since the
// process started is judged against what the disk held when Lazy first saw
// it, which it takes as durable.
type Lazy struct {
	root   string // what it tracks: this directory and everything below
	backup string // hard links to durable files no name reaches any more

	mu sync.RWMutex // every operation holds it shared; PowerLoss exclusively
	st sync.Mutex   // guards the maps below
	// inodes: files written or truncated since their last sync.
	inodes map[uint64]*lazyInode
	// dirs: directories seen, by cleaned path, with their durable entries.
	dirs map[string]*lazyDir
	// linked: backups made, by inode.
	linked map[uint64]string
	off    bool // the power is off: every operation fails
}

type lazyDir struct {
	durable map[string]uint64 // name -> inode, as of the last SyncDir
	isDir   map[uint64]bool   // which of those inodes are directories
}

// lazyInode is a file changed since its last sync. Its lock is held across
// each change and across a sync, so a sync makes durable exactly the
// changes before it.
type lazyInode struct {
	mu     sync.Mutex
	f      *os.File // kept open to restore through, whatever its names; nil once synced
	synced int64    // the size at the last sync
	saved  []extent // bytes of [0, synced) overwritten since, as they were
}

type extent struct {
	off  int64
	data []byte
}

// ErrPowerOff: the Lazy file system lost its power.
var ErrPowerOff = errors.New("vfs: the power is off")

// NewLazy returns the OS file system with a power switch over the
// directory root (a data dir) and everything below it: what happens
// elsewhere (root's own entry in its parent included) is taken as durable,
// since other processes may share those directories. backup is a
// directory outside root, on the same file system (hard links).
func NewLazy(root, backup string) (*Lazy, error) {
	if err := os.MkdirAll(backup, 0o755); err != nil {
		return nil, err
	}
	return &Lazy{root: filepath.Clean(root), backup: filepath.Clean(backup), inodes: map[uint64]*lazyInode{},
		dirs: map[string]*lazyDir{}, linked: map[uint64]string{}}, nil
}

// tracks reports whether dir's entries are Lazy's to undo.
func (l *Lazy) tracks(dir string) bool {
	return dir == l.root || strings.HasPrefix(dir, l.root+"/")
}

var _ FS = (*Lazy)(nil)

func (l *Lazy) begin() error {
	l.mu.RLock()
	if l.off {
		l.mu.RUnlock()
		return ErrPowerOff
	}
	return nil
}

func (l *Lazy) end() { l.mu.RUnlock() }

func inodeOf(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

// see records dir's entries as durable the first time dir is seen. Called
// with l.st held.
func (l *Lazy) see(dir string) {
	dir = filepath.Clean(dir)
	if _, ok := l.dirs[dir]; ok || !l.tracks(dir) {
		return
	}
	d := &lazyDir{durable: map[string]uint64{}, isDir: map[uint64]bool{}}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			d.durable[e.Name()] = inodeOf(fi)
			d.isDir[inodeOf(fi)] = fi.IsDir()
		}
	}
	l.dirs[dir] = d
}

// keep makes sure the file at name stays reachable if a durable entry
// names it: before it is removed or renamed over. Called with l.st held.
func (l *Lazy) keep(name string) error {
	fi, err := os.Lstat(name)
	if err != nil {
		return nil // nothing there
	}
	ino := inodeOf(fi)
	if _, ok := l.linked[ino]; ok || fi.IsDir() || !l.tracks(filepath.Dir(filepath.Clean(name))) || !l.durablyNamed(ino) {
		return nil
	}
	b := filepath.Join(l.backup, fmt.Sprint(ino))
	_ = os.Remove(b)
	if err := os.Link(name, b); err != nil {
		return fmt.Errorf("vfs: lazy: keeping %s: %w", name, err)
	}
	l.linked[ino] = b
	return nil
}

func (l *Lazy) durablyNamed(ino uint64) bool {
	for _, d := range l.dirs {
		for _, i := range d.durable {
			if i == ino {
				return true
			}
		}
	}
	return false
}

// Create implements FS. Creating over an existing file truncates it: its
// old bytes are kept like any overwrite.
func (l *Lazy) Create(name string) (File, error) {
	return l.open(name, os.O_CREATE, true)
}

// Open implements FS.
func (l *Lazy) Open(name string) (File, error) { return l.open(name, 0, false) }

func (l *Lazy) open(name string, flag int, truncate bool) (File, error) {
	if err := l.begin(); err != nil {
		return nil, err
	}
	defer l.end()
	l.st.Lock()
	l.see(filepath.Dir(name))
	l.st.Unlock()
	f, err := os.OpenFile(name, flag|os.O_RDWR, 0o644)
	if err != nil {
		return nil, mapErr(err)
	}
	lf := &lazyFile{l: l, osFile: osFile{f: f}}
	if truncate {
		if err := lf.truncate(0); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return lf, nil
}

// Rename implements FS.
func (l *Lazy) Rename(oldname, newname string) error {
	if err := l.begin(); err != nil {
		return err
	}
	defer l.end()
	l.st.Lock()
	defer l.st.Unlock()
	l.see(filepath.Dir(oldname))
	l.see(filepath.Dir(newname))
	if err := l.keep(newname); err != nil {
		return err
	}
	return mapErr(os.Rename(oldname, newname))
}

// Remove implements FS.
func (l *Lazy) Remove(name string) error {
	if err := l.begin(); err != nil {
		return err
	}
	defer l.end()
	l.st.Lock()
	defer l.st.Unlock()
	l.see(filepath.Dir(name))
	if err := l.keep(name); err != nil {
		return err
	}
	return mapErr(os.Remove(name))
}

// MkdirAll implements FS.
func (l *Lazy) MkdirAll(dir string) error {
	if err := l.begin(); err != nil {
		return err
	}
	defer l.end()
	l.st.Lock()
	defer l.st.Unlock()
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	for _, d := range slices.Backward(missing) {
		l.see(filepath.Dir(d))
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return mapErr(err)
		}
		if l.tracks(d) {
			l.dirs[d] = &lazyDir{durable: map[string]uint64{}, isDir: map[uint64]bool{}} // new: nothing in it is durable
		}
	}
	return nil
}

// List implements FS.
func (l *Lazy) List(dir string) ([]string, error) {
	if err := l.begin(); err != nil {
		return nil, err
	}
	defer l.end()
	return OS{}.List(dir)
}

// Stat implements FS.
func (l *Lazy) Stat(name string) (int64, error) {
	if err := l.begin(); err != nil {
		return 0, err
	}
	defer l.end()
	return OS{}.Stat(name)
}

// SyncDir implements FS: dir's entries as they are now become durable.
func (l *Lazy) SyncDir(dir string) error {
	if err := l.begin(); err != nil {
		return err
	}
	defer l.end()
	if err := (OS{}).SyncDir(dir); err != nil {
		return err
	}
	l.st.Lock()
	defer l.st.Unlock()
	dir = filepath.Clean(dir)
	delete(l.dirs, dir)
	l.see(dir) // now durable as it is
	// Backups no durable entry names any more can go.
	for ino, b := range l.linked {
		if !l.durablyNamed(ino) {
			_ = os.Remove(b)
			delete(l.linked, ino)
		}
	}
	return nil
}

// FreeSpace implements FS.
func (l *Lazy) FreeSpace(dir string) (uint64, error) {
	if err := l.begin(); err != nil {
		return 0, err
	}
	defer l.end()
	return OS{}.FreeSpace(dir)
}

// PowerLoss cuts the power: it waits for the operations under way, undoes
// everything not made durable, makes the result durable, and fails every
// later operation (ErrPowerOff). The caller then ends the process.
func (l *Lazy) PowerLoss() error { return l.PowerLossWith(nil) }

// PowerLossWith is PowerLoss running before (which must not use l) once no
// file operation runs any more and before anything is undone.
func (l *Lazy) PowerLossWith(before func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off {
		return nil
	}
	l.off = true
	if before != nil {
		before()
	}
	l.st.Lock()
	defer l.st.Unlock()
	var errs []error
	// File contents first, through the handles kept (names may be gone).
	for _, in := range l.inodes {
		in.mu.Lock() // no change is under way (l.mu), but a sync may be
		if in.f == nil {
			in.mu.Unlock()
			continue
		}
		for _, e := range slices.Backward(in.saved) {
			if _, err := in.f.WriteAt(e.data, e.off); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, in.f.Truncate(in.synced), in.f.Sync(), in.f.Close())
		in.f = nil
		in.mu.Unlock()
	}
	errs = append(errs, l.restoreNames())
	return errors.Join(errs...)
}

// restoreNames puts every seen directory's entries back as they were at its
// last sync: what was durable is linked back (from another name of the
// same file, or its backup), what was not is removed.
func (l *Lazy) restoreNames() error {
	var errs []error
	paths := map[uint64]string{} // any current path of each inode
	for ino, b := range l.linked {
		paths[ino] = b
	}
	current := map[string]map[string]uint64{}
	for dir := range l.dirs {
		cur := map[string]uint64{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				cur[e.Name()] = inodeOf(fi)
				paths[inodeOf(fi)] = filepath.Join(dir, e.Name())
			}
		}
		current[dir] = cur
	}
	// Every durable file gets a backup name first: putting names back may
	// remove the only other name a file has.
	for _, d := range l.dirs {
		for _, ino := range d.durable {
			if _, ok := l.linked[ino]; ok || d.isDir[ino] {
				continue
			}
			if src, ok := paths[ino]; ok {
				b := filepath.Join(l.backup, fmt.Sprint(ino))
				_ = os.Remove(b)
				if err := os.Link(src, b); err != nil {
					errs = append(errs, err)
					continue
				}
				l.linked[ino], paths[ino] = b, b
			}
		}
	}
	dirs := make([]string, 0, len(l.dirs))
	for d := range l.dirs {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") < strings.Count(dirs[j], "/") })
	// Link back what is durable and missing (parents first).
	for _, dir := range dirs {
		d, cur := l.dirs[dir], current[dir]
		for name, ino := range d.durable {
			p := filepath.Join(dir, name)
			if cur[name] == ino {
				continue
			}
			if _, ok := cur[name]; ok {
				if err := l.removeAll(p); err != nil {
					errs = append(errs, err)
				}
			}
			if d.isDir[ino] {
				errs = append(errs, os.MkdirAll(p, 0o755))
			} else if src, ok := paths[ino]; ok {
				errs = append(errs, os.Link(src, p))
			}
			cur[name] = ino
		}
	}
	// Then remove what is not durable (children first).
	for _, dir := range slices.Backward(dirs) {
		d, cur := l.dirs[dir], current[dir]
		for name, ino := range cur {
			if d.durable[name] != ino {
				errs = append(errs, l.removeAll(filepath.Join(dir, name)))
			}
		}
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, OS{}.SyncDir(dir))
		}
	}
	for _, b := range l.linked {
		_ = os.Remove(b)
	}
	return errors.Join(errs...)
}

func (l *Lazy) removeAll(p string) error {
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
