package storage

import "sync/atomic"

// Stats are a log's I/O counters since it was opened (the server's
// metrics): what the writer wrote, and how reads were served — from the
// tail cache, or from the segment files (catch-up reads, read-ahead
// included).
type Stats struct {
	BytesWritten  int64 // record bytes written to segment files
	BytesBorrowed int64 // of which user payload written from the entries' own bytes, uncopied (chunkMem.borrowed)
	CacheHits     int64 // reads served from the tail cache
	CacheMisses   int64 // reads that went to the segment files
	DiskReadBytes int64 // bytes read from segment files by reads
	Segments      int   // segment files now (the active one included)
}

type stats struct {
	written, borrowed, hits, misses, diskRead atomic.Int64
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.RLock()
	segs := len(l.segs)
	l.mu.RUnlock()
	return Stats{BytesWritten: l.stats.written.Load(), BytesBorrowed: l.stats.borrowed.Load(), CacheHits: l.stats.hits.Load(), CacheMisses: l.stats.misses.Load(),
		DiskReadBytes: l.stats.diskRead.Load(), Segments: segs}
}
