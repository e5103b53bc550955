package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// lazyFile is an OS file whose overwrites of synced bytes are remembered.
type lazyFile struct {
	l *Lazy
	osFile
}

// inode returns the file's inode state, locked, made on first change.
func (f *lazyFile) inode() (*lazyInode, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return nil, mapErr(err)
	}
	ino := inodeOf(fi)
	f.l.st.Lock()
	in, ok := f.l.inodes[ino]
	if !ok {
		in = &lazyInode{synced: fi.Size()}
		f.l.inodes[ino] = in
	}
	f.l.st.Unlock()
	in.mu.Lock()
	if in.f == nil { // clean since its last sync: dirtied now
		h, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.f.Fd()), os.O_RDWR, 0)
		if err != nil {
			in.mu.Unlock()
			return nil, mapErr(err)
		}
		in.f = h
		// Clean: its size now is the synced one (the inode may even be a
		// new file's, its number reused).
		in.synced = fi.Size()
	}
	return in, nil
}

// save keeps the synced bytes of [off, end) not saved yet. Called with
// in.mu held.
func (in *lazyInode) save(off, end int64) error {
	end = min(end, in.synced)
	for off < end {
		next := end
		covered := false
		for _, e := range in.saved {
			eEnd := e.off + int64(len(e.data))
			switch {
			case e.off <= off && off < eEnd:
				off, covered = eEnd, true
			case off < e.off && e.off < next:
				next = e.off
			}
			if covered {
				break
			}
		}
		if covered {
			continue
		}
		buf := make([]byte, next-off)
		if _, err := in.f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return mapErr(err)
		}
		in.saved = append(in.saved, extent{off: off, data: buf})
		off = next
	}
	return nil
}

func (f *lazyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.l.begin(); err != nil {
		return 0, err
	}
	defer f.l.end()
	in, err := f.inode()
	if err != nil {
		return 0, err
	}
	defer in.mu.Unlock()
	if err := in.save(off, off+int64(len(p))); err != nil {
		return 0, err
	}
	return f.osFile.WriteAt(p, off)
}

// WriteAtv overrides osFile's: the bytes it overwrites are saved first,
// as WriteAt does.
func (f *lazyFile) WriteAtv(bufs [][]byte, off int64) error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	in, err := f.inode()
	if err != nil {
		return err
	}
	defer in.mu.Unlock()
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if err := in.save(off, off+int64(n)); err != nil {
		return err
	}
	return f.osFile.WriteAtv(bufs, off)
}

func (f *lazyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.l.begin(); err != nil {
		return 0, err
	}
	defer f.l.end()
	return f.osFile.ReadAt(p, off)
}

func (f *lazyFile) Truncate(size int64) error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	return f.truncate(size)
}

func (f *lazyFile) truncate(size int64) error {
	in, err := f.inode()
	if err != nil {
		return err
	}
	defer in.mu.Unlock()
	if err := in.save(size, in.synced); err != nil {
		return err
	}
	return f.osFile.Truncate(size)
}

func (f *lazyFile) Allocate(size int64) error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	in, err := f.inode() // the size it had stays the synced one
	if err != nil {
		return err
	}
	defer in.mu.Unlock()
	return f.osFile.Allocate(size)
}

// Sync implements File: the file's bytes as they are now become durable.
func (f *lazyFile) Sync() error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	fi, err := f.f.Stat()
	if err != nil {
		return mapErr(err)
	}
	f.l.st.Lock()
	in := f.l.inodes[inodeOf(fi)]
	f.l.st.Unlock()
	if in == nil {
		return f.osFile.Sync()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := f.osFile.Sync(); err != nil {
		return err
	}
	size, err := f.osFile.Size()
	if err != nil {
		return err
	}
	if in.f != nil {
		_ = in.f.Close()
	}
	in.f, in.synced, in.saved = nil, size, nil
	return nil
}

func (f *lazyFile) Size() (int64, error) {
	if err := f.l.begin(); err != nil {
		return 0, err
	}
	defer f.l.end()
	return f.osFile.Size()
}

func (f *lazyFile) DropCache(off, n int64) error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	return f.osFile.DropCache(off, n)
}

func (f *lazyFile) Prefetch(off, n int64) error {
	if err := f.l.begin(); err != nil {
		return err
	}
	defer f.l.end()
	return f.osFile.Prefetch(off, n)
}

func (f *lazyFile) ReadDirect(p []byte, off int64) (int, error) {
	if err := f.l.begin(); err != nil {
		return 0, err
	}
	defer f.l.end()
	return f.osFile.ReadDirect(p, off)
}
