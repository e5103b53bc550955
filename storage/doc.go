// Package storage is VDL's storage engine: one Log per stream (Raft group)
// holding the merged Raft log and Kafka log. Every Raft entry is one record
// in a segment file; a user entry's payload is the Kafka RecordBatch bytes,
// so a fetch returns exactly what was stored. It is written against vfs.FS
// alone, so the same code runs on the real disk and on the simulator's.
// docs/storage.md has the file formats, the durability contract and the
// measurements.
//
// What it owns, by file:
//
//   - segments (segment.go, format.go): files of 8-aligned, CRC-chained
//     records, rolled when full, allocated ahead of the writer in growing
//     steps (write.go, allocate) so an idle stream holds little disk;
//   - indexes (index.go): the active segment's ridx (Raft index → record)
//     and lidx (Kafka offset → user entry) in memory, written beside a
//     closed segment as .ridx and .lidx files when it rolls;
//   - the write path (write.go, log.go): Write validates a whole call before
//     writing anything, stamps Kafka offsets and writes one buffer per
//     segment; Sync is one fdatasync, run without the writer's lock so the
//     next Write is encoded and written while the disk flushes this one
//     (the grouping of proposals into appends is raftnode's);
//   - the tail cache (cache.go): the newest entries' data, sliced out of
//     the write buffers, so tailing readers and raft do no IO;
//   - reads: Entries for raft (read.go), Read and OffsetForTime for Kafka
//     (read_kafka.go);
//     catch-up reads plan under the read lock and pread without it;
//   - recovery (recover.go): Open;
//   - snapshots (snapshot.go): a snapshot stands for the log itself, and
//     InstallSnapshot rebuilds a follower's log from the leader's entries;
//   - retention (retention.go): DeleteBefore removes whole segments below
//     a retention point, and RetentionPoint applies a policy;
//   - the meta file (meta.go): the retention point, the hard state saved by
//     a truncation, the membership history;
//   - the file cache (filecache.go): closed segments' files, opened on
//     demand and closed least recently used first, shared by a server's
//     logs;
//   - the space reserve (space.go): a ballast file given up so that a full
//     disk still lets a roll and the retention that frees space through.
//
// How data flows: Write → the active segment (and the tail cache; readers
// see it once Write returns) → Sync makes it durable and returns what raft may be told
// is durable (Synced) → readers serve it from the tail cache or the
// segment files. At Open, recovery checks the segment headers, vouches for
// closed segments by their index files and the next segment's header (or
// rescans them), scans the last segment to its first invalid record, where
// new writes start, and restores the hard state; damage anywhere but the
// torn tail is ErrCorrupt, never silently cut.
package storage
