package storage

import "github.com/vdl-project/vdl/vfs"

// Where a disk read of records lands. A closed segment is kept out of the
// page cache (see KeepPageCache), so reading it through the cache cost a
// hint to start the reads ahead, a copy out of the cache and a hint to
// drop the pages again per read (two fifths of a leader's CPU while ten
// consumers caught up): it is read past the cache instead (vfs
// File.ReadDirect), whole blocks into aligned memory. Catch-up reads
// (readRun) and raft's reads (readSpan) decide it here, once.

// diskSpan is a read of the bytes [start, end) of one segment. from is the
// file offset of the buffer's first byte: start, or for a direct read the
// block holding it.
type diskSpan struct {
	start, end, from int64
	direct           bool
}

// span is how [start, end) of a segment is read: closed says the segment
// is not the active one (which stays in the page cache).
func (l *Log) span(closed bool, start, end int64) diskSpan {
	if !closed || l.keepPageCache {
		return diskSpan{start: start, end: end, from: start}
	}
	return diskSpan{start: start, end: end, from: vfs.AlignDown(start), direct: true}
}

// size is the buffer the read needs: the span, or the whole blocks
// around it.
func (d diskSpan) size() int {
	if !d.direct {
		return int(d.end - d.start)
	}
	return int(vfs.AlignUp(d.end) - d.from)
}

// need is how many of the buffer's bytes must be read: a direct read's
// last block may run past the end of the file.
func (d diskSpan) need() int { return int(d.end - d.from) }

// readAt reads p at off from f, at least need bytes of it: with ReadDirect
// (p aligned, the file may end inside p), or all of p through the cache.
func readAt(f vfs.File, p []byte, off int64, need int, direct bool) error {
	if direct {
		return preadDirect(f, p, off, need)
	}
	return preadFull(f, p, off)
}
