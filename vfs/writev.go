package vfs

import "bytes"

// WriteAtv writes bufs one after another at off: all of them, or an error.
//
// On an OS file it is one pwritev (more only if the kernel writes part of
// it or there are more buffers than one call takes), so a caller can hand
// over pieces it filled separately instead of copying them into one
// buffer (the storage engine's large records: Go zeroes a buffer it makes,
// not one grown by append). On any other File it is one WriteAt of the
// pieces joined: a wrapper that injects faults or models a disk sees one
// write, as before.
func WriteAtv(f File, bufs [][]byte, off int64) error {
	if v, ok := f.(VectorWriter); ok {
		return v.WriteAtv(bufs, off)
	}
	var p []byte
	if len(bufs) == 1 {
		p = bufs[0]
	} else {
		p = bytes.Join(bufs, nil)
	}
	_, err := f.WriteAt(p, off)
	return err
}

// VectorWriter is a File that writes several buffers in one call (what
// WriteAtv does with them). A wrapper that embeds a File type having it
// (not the File interface) must define it too, or its own WriteAt would be
// bypassed: lazyFile does.
type VectorWriter interface {
	WriteAtv(bufs [][]byte, off int64) error
}
