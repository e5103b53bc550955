package storage

// This file is the storage engine's contract with the rest of VDL (raftnode,
// kafka, server). The implementation lives beside it.

import (
	"errors"
	"log/slog"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/vfs"
)

// Errors a caller can act on.
var (
	// ErrOutOfRange: a Kafka offset or Raft index below the log start (deleted
	// by retention) or above the log end.
	ErrOutOfRange = errors.New("storage: out of range")
	// ErrCorrupt: a record in the middle of the log failed its checksum. The
	// wrapping error names the file and position. Never silently skipped.
	ErrCorrupt = errors.New("storage: corrupt log")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("storage: closed")
	// ErrBadEntry: an entry that cannot be stored (a user entry that is not a
	// sequence of whole RecordBatch v2 batches). Validate before proposing.
	ErrBadEntry = errors.New("storage: malformed entry")
	// ErrNotCommitted: entries asked of CommittedEntries are past this
	// replica's commit index.
	ErrNotCommitted = errors.New("storage: entries not committed here yet")
)

// Entry payload tags. A raftpb.EntryNormal entry's Data is empty (the leader's
// no-op) or starts with one tag byte:
//
//	TagUser    + one or more whole Kafka RecordBatch v2 batches (takes offsets)
//	TagCommand + a replicated control command (retention, ...; takes none)
//
// raftpb.EntryConfChange and EntryConfChangeV2 entries are stored as they are.
const (
	TagUser    byte = 1
	TagCommand byte = 2
)

// Options configure one log (one stream's Raft group).
type Options struct {
	FS  vfs.FS
	Dir string // one directory per stream; created if missing
	// Stream is the stream's identity. It is mixed into every record's
	// checksum, so a record read from the wrong stream's file is detected.
	Stream uint64
	// SegmentSize is the size at which a segment rolls. Default 64 MiB. A
	// segment's file is not preallocated whole: it grows ahead of its
	// records, doubling from 128 KiB (less for small segments); a segment
	// after a full one starts whole.
	// An entry larger than a segment gets a segment of its own.
	SegmentSize int64
	// TailCacheBytes bounds the in-memory cache of the newest records.
	// Default 8 MiB; with TailBudget, default (and at most) the budget.
	TailCacheBytes int64
	// ReadAhead: a pooled catch-up read from the disk starts reading the
	// next chunk in a goroutine (readahead.go). Off by default: the
	// simulator's disk must see only its own, deterministic IO.
	ReadAhead bool
	// ReadBudget is the IO budget of catch-up reads (disk reads of Read
	// and ReadPooled, and the reads ahead for them) of all logs that share
	// it (a server's): readbudget.go. Nil: none.
	ReadBudget *ReadBudget
	// TailBudget bounds the tail caches of all logs that share it (a
	// server's): the most recently written streams keep the most. Nil:
	// the log's cache has TailCacheBytes alone.
	TailBudget *TailBudget
	// KeepPageCache leaves closed segments in the OS page cache. By
	// default a segment is dropped from it (posix_fadvise DONTNEED) once it
	// is closed and durable, so the page cache holds at most the active
	// segment of each log: tailing reads come from the tail cache, reads a
	// little behind from the active segment's pages, and the page cache
	// does not grow with everything written, evicting what others need
	// (on virtual machines every fresh page it grows into also costs a
	// host page fault: writes measured 2-4x slower). Catch-up reads of
	// closed segments then come from the disk, past the page cache
	// (O_DIRECT: File.ReadDirect); with KeepPageCache, through it.
	KeepPageCache bool
	// MaxReadBytes caps one Read (a fetch of one stream): larger asks get
	// about this much (the first batch always whole). Default 16 MiB.
	MaxReadBytes int
	// Space is the data dir's space reserve (shared by its logs): a roll,
	// index or retention write that finds the disk full gives it up and
	// tries again. Nil: none.
	Space *Space
	// Files bounds the file handles of closed segments; a server shares
	// one between all its logs, so its descriptors do not grow with the
	// number of streams and segments. Nil: the log makes its own, of 64
	// segments (see FileCache).
	Files  *FileCache
	Logger *slog.Logger
	// Name names the log in its log lines ("stream"; none if empty).
	Name string
}

// Synced is what Sync returns: everything written before the Sync call is
// durable, up to and including Raft index LastIndex and the hard state.
// Only a Synced value may be used to acknowledge an append.
type Synced struct {
	LastIndex uint64
	LastTerm  uint64
}

// Batch is one run of whole Kafka RecordBatch v2 batches read from the log,
// as stored (baseOffset stamped). The slices alias immutable memory (tail
// cache or a freshly read buffer); callers must not modify them. It is the
// Kafka front end's type (a leaf package), so the front end needs nothing
// from storage.
type Batch = batchfmt.Batch
