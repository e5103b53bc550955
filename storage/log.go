package storage

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/vfs"
)

const (
	defaultSegmentSize    = 64 << 20
	defaultTailCacheBytes = 8 << 20
	defaultMaxReadBytes   = 16 << 20
)

// Log is one stream's merged Raft log and Kafka log. One goroutine writes
// (Write, Sync); any number read concurrently.
//
// Locking: wmu serializes everything that changes the log (Write, Sync,
// DeleteBefore, ApplyConfState, Bootstrap, Close); the writer holds it
// through disk IO. mu guards what readers look at; the writer takes it only
// to publish, never during an fsync. Readers acquire a segment for their
// preads, so its files cannot be closed under them (see segment).
type Log struct {
	fs      vfs.FS
	dir     string
	stream  uint64
	segSize int64
	logger  *slog.Logger // see log
	name    string

	keepPageCache bool
	maxRead       int
	space         *Space
	files         *FileCache    // closed segments' file handles
	ahead         aheadReads    // catch-up reads started ahead of their consumers
	lastWrite     atomic.Uint64 // TailBudget's recency tick of the newest write
	heldAt        int           // position + 1 in TailBudget.holding (0: not there); the budget's mu
	readAhead     bool          // Options.ReadAhead
	readBudget    *ReadBudget   // Options.ReadBudget
	stats         stats         // I/O counters (Stats)

	wmu sync.Mutex
	mu  sync.RWMutex
	// smu is held by Sync for its fdatasync, which runs without wmu so the
	// writer can encode and write the next group while the disk flushes
	// this one. Whatever closes or removes files (Close, DeleteBefore,
	// reset) takes smu before wmu, so no file goes away under an fsync.
	smu sync.Mutex

	// Guarded by mu (changed with wmu and mu held).
	closed bool
	segs   []*segment // ascending; the last one is active
	ridx   []ridxEnt  // active segment: entry active.hdr.first+i
	lidx   []lidxEnt  // active segment's user entries
	cache  tailCache
	st     state       // the newest state written
	confs  []confEntry // conf state history
	meta   meta
	prod   producerState // the saved producer state (producers.go)

	// Writer-only (wmu).
	failed   error // sticky: after a failed write the file state is unknown
	dirDirty bool  // files created since the last Sync
	// writes counts writes to the active segment's file; synced is the
	// count the last Sync covered, parkSeen the count at the last Park.
	writes, synced, parkSeen uint64
	parked                   *segment   // the active segment, while Park has it in the file cache
	uncache                  []*segment // rolled segments the next Sync drops from the page cache
	scrP                     []prepEnt
	scrR                     []ridxEnt
	scrL                     []lidxEnt
	scrC                     []cacheEnt
	// reclaimed: the active segment was taken back from the file cache
	// (counted in its out) and is not parked again yet.
	reclaimed bool

	pendingApplied atomic.Uint64 // SetApplied
	durableApplied atomic.Uint64 // Applied
}

var _ raft.Storage = (*Log)(nil)

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// Close releases the files. It does not sync: only Sync makes data durable.
func (l *Log) Close() error {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closed = true
	if l.reclaimed {
		l.active().files.returned()
		l.reclaimed = false
	}
	for _, s := range l.segs {
		s.retire()
	}
	l.cache.reset() // off the budget's list
	return nil
}

// checkWriter is the writer's entry check; wmu must be held. It takes
// the active segment back from the file cache if it was parked.
func (l *Log) checkWriter() error {
	if l.closed {
		return ErrClosed
	}
	if l.failed != nil {
		return l.failed
	}
	return l.unpark()
}

// Park hands the active segment's data file to the server's file cache if
// nothing was written since the previous call (the stream is idle) and
// everything written is synced: an idle stream then holds no descriptor
// once the cache needs the slot, and descriptors are bounded by the cache,
// not by the number of streams. The next write takes it back (reopening
// the file if the cache closed it); readers open it through the cache
// like a closed segment's. Call it periodically; it reports whether the
// segment is parked.
func (l *Log) Park() bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed || l.failed != nil {
		return false
	}
	if l.writes != l.parkSeen {
		l.parkSeen = l.writes
		return false
	}
	return l.parkLocked()
}

// parkLocked parks the active segment if everything written is synced;
// wmu is held.
func (l *Log) parkLocked() bool {
	act := l.active()
	c := act.files
	c.mu.Lock()
	if l.writes != l.synced || l.dirDirty || act.cached || act.retired || act.f == nil {
		parked := act.parked
		c.mu.Unlock()
		return parked
	}
	act.cached, act.parked = true, true
	c.n++
	if l.reclaimed {
		c.out--
		l.reclaimed = false
	}
	c.pushLocked(act) // its file is open: it takes a slot like a closed segment's
	victims := c.evictLocked()
	c.mu.Unlock()
	closeAll(victims)
	l.parked = act
	return true
}

// unpark takes a parked active segment back from the cache, its file open;
// wmu is held. Every write checks it: a plain field, not the shared
// cache's lock.
func (l *Log) unpark() error {
	act := l.parked
	if act == nil {
		return nil
	}
	if err := act.reclaim(); err != nil {
		return l.fail(err)
	}
	c := act.files
	c.mu.Lock()
	act.parked = false
	c.out++
	c.mu.Unlock()
	l.parked, l.reclaimed = nil, true
	return nil
}

func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = fmt.Errorf("storage: log %s unusable after failed IO: %w", l.dir, err)
	}
	return err
}

// Bootstrap starts a new, empty log of a group's founding member: the log
// begins after index 1 (term 1), at which the initial membership is in
// force, as if a snapshot had been installed. Durable on return.
func (l *Log) Bootstrap(cs *pb.ConfState) error {
	l.wmu.Lock()
	act := l.active()
	isNew := len(l.segs) == 1 && act.hdr.first == 1 && act.last == 0 && len(l.confs) == 0
	l.wmu.Unlock()
	if !isNew {
		return fmt.Errorf("storage: Bootstrap of a log that is not new (%s)", l.dir)
	}
	return l.reset(snapDesc{first: 2, prevTerm: 1, confs: []confEntry{{index: 1, cs: cs}}}, 1)
}

// ApplyConfState records the ConfState in force from index on, durably.
// Applied() is at least index afterwards: conf changes are applied in order.
func (l *Log) ApplyConfState(index uint64, cs *pb.ConfState) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	confs := make([]confEntry, 0, len(l.confs)+1)
	for _, c := range l.confs {
		if c.index < index {
			confs = append(confs, c)
		}
	}
	confs = append(confs, confEntry{index: index, cs: proto.Clone(pb.EnsureConfState(cs)).(*pb.ConfState)})
	if err := l.setConfs(confs); err != nil {
		return err
	}
	if index > l.durableApplied.Load() {
		l.durableApplied.Store(index)
	}
	return nil
}

func (l *Log) setConfs(confs []confEntry) error {
	m := l.meta
	m.confs = confs
	if err := saveMeta(l.fs, l.dir, &m); err != nil {
		return err
	}
	l.mu.Lock()
	l.meta, l.confs = m, confs
	l.mu.Unlock()
	return nil
}

// SetApplied notes the last applied index; the next Write or Sync records it.
func (l *Log) SetApplied(index uint64) { l.pendingApplied.Store(index) }

// Applied returns the last applied index known to be durable.
func (l *Log) Applied() uint64 { return l.durableApplied.Load() }

// Sync makes everything written before it was called durable and says up
// to where. The fdatasync itself runs without the writer lock: Write may go
// on meanwhile (what it writes is made durable by a later Sync).
func (l *Log) Sync() (Synced, error) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	if err := l.checkWriter(); err != nil {
		l.wmu.Unlock()
		return Synced{}, err
	}
	if ap := l.pendingApplied.Load(); ap != l.st.applied {
		st := l.st
		st.applied = ap
		if err := l.appendRecords(nil, nil, &st); err != nil {
			l.wmu.Unlock()
			return Synced{}, err
		}
	}
	// Everything up to act.last is in act's file: earlier segments were
	// synced when they were rolled. act is pinned for the fdatasync: the
	// writer may roll it into the file cache meanwhile, or truncate it away.
	act := l.active()
	if err := act.acquire(); err != nil {
		l.wmu.Unlock()
		return Synced{}, err
	}
	defer act.release()
	f, synced, applied, dirDirty, writes := act.f, Synced{LastIndex: act.last, LastTerm: act.lastTerm}, l.st.applied, l.dirDirty, l.writes
	type span struct {
		s   *segment
		f   vfs.File
		end int64
	}
	var uncache []span
	for _, s := range l.uncache {
		if f := s.pinIfOpen(); f != nil { // else deleted, or its files closed, since
			uncache = append(uncache, span{s, f, s.end})
		}
	}
	l.uncache = nil
	l.dirDirty = false
	wrote := writes > l.synced
	l.wmu.Unlock()

	var t0 time.Time
	if wrote && l.readBudget != nil {
		t0 = time.Now() // how long writes wait is what catch-up reads yield to
	}
	err := l.flush(f, dirDirty)
	if !t0.IsZero() && err == nil {
		l.readBudget.noteSync(time.Since(t0))
	}
	for _, u := range uncache { // synced by roll
		if err == nil {
			_ = u.f.DropCache(0, u.end) // a hint only
		}
		u.s.release()
	}

	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err != nil {
		l.dirDirty = l.dirDirty || dirDirty
		return Synced{}, l.fail(err)
	}
	l.synced = max(l.synced, writes)
	if applied > l.durableApplied.Load() {
		l.durableApplied.Store(applied)
	}
	if l.reclaimed && act.files.crowded() {
		// Parked again at once while the cache is over its limit: when
		// thousands of idle streams write at once (a restarted peer's
		// groups elect, each writing its vote), their files go back to
		// the cache as each write is synced instead of staying open
		// until the next parking rounds, so descriptors stay near
		// open_segments whatever the number of streams.
		l.parkLocked()
	}
	return synced, nil
}

// flush is Sync's disk part: fdatasync the active file, then the directory
// if files were created.
func (l *Log) flush(f vfs.File, dirDirty bool) error {
	failpoint.Inject("beforeSync", func(val failpoint.Value) {
		failpoints.Hit("storage/beforeSync")
		failpoints.CrashOn(val)
		if failpoints.EIO(val) {
			// As a failed fsync: the log is unusable from now on.
			failpoint.Return(failpoints.IOError())
		}
	})
	if err := f.Sync(); err != nil {
		return err
	}
	if dirDirty {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	failpoint.Inject("afterSync", func(val failpoint.Value) {
		failpoints.Hit("storage/afterSync")
		failpoints.CrashOn(val)
	})
	return nil
}

// log returns the logger for one of the log's lines, its name attached.
// Made per line, not kept: a server hosts thousands of logs that seldom
// log, and a kept logger is four objects every collection marks.
func (l *Log) log() *slog.Logger {
	if l.name == "" {
		return l.logger
	}
	return l.logger.With("stream", l.name)
}
