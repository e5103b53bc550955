package storage

import (
	"sync"

	"github.com/vdl-project/vdl/vfs"
)

// defaultFileCacheSegments is the limit of the cache a Log makes for
// itself when Options.Files is nil: 64 closed segments (192 files), a
// per-log bound that keeps a standalone log's reads of recent segments
// hits. A server shares one cache between its logs instead, so its
// descriptors are bounded whatever the number of streams.
const defaultFileCacheSegments = 64

// FileCache bounds how many closed segments have their files (the .seg and
// its .ridx and .lidx) open at once. Every segment used to keep its files
// open for the life of its log, so descriptors grew with the data until a
// server hit its ulimit. One cache is shared by all the logs of a server;
// it is safe for concurrent use.
//
// A closed segment's files are opened on demand, when a reader acquires
// the segment, and the cache closes the least recently used segment's
// files when opening one more would exceed the limit. Files a reader is
// using are never closed under it: if every open segment is in use, the
// cache goes over the limit rather than block or fail a read, and comes
// back under it as readers release. The active segment of each log is
// not the cache's: its data file stays open while it is written.
//
// mu also guards the reference counts and file handles of the segments of
// every log using the cache (see segment): one lock, so that deciding to
// close a segment's files and pinning them for a reader never race. No IO
// is done under it (opens and closes happen outside), so it is held for a
// few pointer updates.
type FileCache struct {
	mu    sync.Mutex
	limit int
	// n counts the slots taken: segments in the LRU list (files open)
	// plus those being opened.
	n int
	// out counts the active segments taken back from the cache by a
	// write (Log.unpark) and not parked again: their files are open too.
	out int
	// The LRU list of cached segments whose files are open, least
	// recently used at the tail. A list rather than a map, so which
	// segment is closed never depends on map order (the simulator relies
	// on runs being reproducible).
	head, tail *segment
}

// NewFileCache returns a cache keeping at most maxSegments closed segments'
// files open (3 files each), at least 1.
func NewFileCache(maxSegments int) *FileCache {
	return &FileCache{limit: max(maxSegments, 1)}
}

// reserve takes a slot for a segment about to have its files opened,
// closing least recently used ones to make room.
func (c *FileCache) reserve() {
	c.mu.Lock()
	c.n++
	victims := c.evictLocked()
	c.mu.Unlock()
	closeAll(victims)
}

// crowded reports whether the files open in the cache and those taken
// back from it by writers fill the limit.
func (c *FileCache) crowded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n+c.out >= c.limit
}

// returned uncounts a taken-back active segment whose log closed.
func (c *FileCache) returned() {
	c.mu.Lock()
	c.out--
	c.mu.Unlock()
}

// unreserve gives back a slot whose segment did not get its files.
func (c *FileCache) unreserve() {
	c.mu.Lock()
	c.n--
	c.mu.Unlock()
}

// adopt makes s, whose files are open in a reserved slot, a cached
// segment: the most recently used.
func (c *FileCache) adopt(s *segment) {
	c.mu.Lock()
	s.cached = true
	c.pushLocked(s)
	c.mu.Unlock()
}

// evictLocked unlinks least recently used segments that no reader holds
// until the slots fit the limit, and returns their files to close (after
// mu is released).
func (c *FileCache) evictLocked() []vfs.File {
	var out []vfs.File
	for s := c.tail; s != nil && c.n > c.limit; {
		newer := s.newer
		if s.refs == 0 {
			out = append(out, s.takeFilesLocked()...)
		}
		s = newer
	}
	return out
}

// pushLocked links s at the head (s holds a slot already).
func (c *FileCache) pushLocked(s *segment) {
	s.inLRU = true
	s.older, s.newer = c.head, nil
	if c.head != nil {
		c.head.newer = s
	} else {
		c.tail = s
	}
	c.head = s
}

// unlinkLocked takes s off the list and frees its slot.
func (c *FileCache) unlinkLocked(s *segment) {
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		c.head = s.older
	}
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		c.tail = s.newer
	}
	s.older, s.newer, s.inLRU = nil, nil, false
	c.n--
}

// touchLocked makes s the most recently used.
func (c *FileCache) touchLocked(s *segment) {
	if c.head != s {
		c.unlinkLocked(s)
		c.n++ // same slot
		c.pushLocked(s)
	}
}

func closeAll(fs []vfs.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
