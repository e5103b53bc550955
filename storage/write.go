package storage

import (
	"fmt"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/vfs"
)

// prepEnt is a validated entry on its way to disk.
type prepEnt struct {
	typ, flags uint8
	payload    []byte // the caller's bytes; copied (and stamped) into the write buffer
	info       batchInfo
	borrow     bool // written and cached as the caller's bytes, uncopied (planChunk)
}

// Write appends ents (truncating a conflicting suffix first) and records
// hs if it is not empty. Nothing is durable until Sync. A user entry whose
// batches carry their stamps already is kept as it is, uncopied (the tail
// cache serves its bytes): the caller never changes an entry's Data after
// writing it (raft's entries are never changed once made).
func (l *Log) Write(ents []*pb.Entry, hs *pb.HardState) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	prep, err := l.prepare(ents)
	// The scratch list keeps its room for the next write, not the
	// caller's bytes: an idle stream's last write would stay in memory,
	// outside the tail-cache budget (TestWrittenBytesAreNotKeptByTheWriter).
	defer clear(prep)
	if err != nil {
		return err
	}
	st := l.st
	if !raft.IsEmptyHardState(hs) {
		st.term, st.vote, st.commit = hs.GetTerm(), hs.GetVote(), hs.GetCommit()
	}
	st.applied = l.pendingApplied.Load()
	if len(ents) > 0 && ents[0].GetIndex() <= l.active().last {
		if err := l.truncate(ents[0].GetIndex()); err != nil {
			return l.fail(err)
		}
	}
	var stp *state
	if st.term != l.st.term || st.vote != l.st.vote || st.commit != l.st.commit || st.applied != l.st.applied {
		stp = &st
	}
	if len(prep) == 0 && stp == nil {
		return nil
	}
	return l.appendRecords(ents, prep, stp)
}

// prepare validates ents against the log before anything is written.
func (l *Log) prepare(ents []*pb.Entry) (_ []prepEnt, err error) {
	if len(ents) == 0 {
		return nil, nil
	}
	first := ents[0].GetIndex()
	act := l.active()
	if first < l.segs[0].hdr.first || first > act.last+1 {
		return nil, fmt.Errorf("%w: write at index %d, log holds [%d, %d]",
			ErrOutOfRange, first, l.segs[0].hdr.first, act.last)
	}
	prevTerm, err := l.termLocked(first - 1)
	if err != nil {
		return nil, err
	}
	prep := l.scrP[:0]
	defer func() {
		if err != nil {
			clear(prep) // a bad entry: the scratch keeps no caller's bytes either
		}
	}()
	for k, e := range ents {
		if e.GetIndex() != first+uint64(k) {
			return nil, fmt.Errorf("%w: entry %d has index %d, want %d", ErrBadEntry, k, e.GetIndex(), first+uint64(k))
		}
		if e.GetTerm() < prevTerm {
			return nil, fmt.Errorf("%w: entry %d term %d below previous term %d", ErrBadEntry, e.GetIndex(), e.GetTerm(), prevTerm)
		}
		prevTerm = e.GetTerm()
		p := prepEnt{payload: e.Data}
		if e.Type != nil {
			p.flags |= flagTypeSet
		}
		if e.Data != nil {
			p.flags |= flagDataSet
		}
		if p.typ, p.payload, p.info, err = checkEntry(e); err != nil {
			return nil, err
		}
		prep = append(prep, p)
	}
	l.scrP = prep
	return prep, nil
}

// CheckEntry reports whether the log can store e: a known type, a user
// entry made of whole v2 batches, not too large. Raft's driver checks
// entries from the network with it before raft sees them (a malformed
// entry reaching Write would stop the server).
func CheckEntry(e *pb.Entry) error {
	_, _, _, err := checkEntry(e)
	return err
}

func checkEntry(e *pb.Entry) (typ uint8, payload []byte, info batchInfo, err error) {
	payload = e.Data
	switch e.GetType() {
	case pb.EntryNormal:
		typ = recNormal
		if len(e.Data) > 0 && e.Data[0] == TagUser {
			typ, payload = recUser, e.Data[1:]
			if info, err = parseBatches(payload); err != nil {
				return 0, nil, info, fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
		}
	case pb.EntryConfChange:
		typ = recConfChange
	case pb.EntryConfChangeV2:
		typ = recConfChangeV2
	default:
		return 0, nil, info, fmt.Errorf("%w: entry %d has type %v", ErrBadEntry, e.GetIndex(), e.GetType())
	}
	if len(payload) > maxPayload {
		return 0, nil, info, fmt.Errorf("%w: entry %d is %d bytes", ErrBadEntry, e.GetIndex(), len(e.Data))
	}
	return typ, payload, info, nil
}

// appendRecords writes the prepared entries, then a state record if st
// is not nil, rolling segments as they fill: one WriteAt per segment. The
// state goes last, so a torn write never keeps a commit index without the
// entries it covers.
func (l *Log) appendRecords(ents []*pb.Entry, prep []prepEnt, st *state) error {
	items := len(prep)
	if st != nil {
		items++
	}
	size := func(i int) int64 {
		if i == len(prep) {
			return recSize(stateSize)
		}
		return recSize(len(prep[i].payload))
	}
	for i := 0; i < items; {
		act := l.active()
		j, end := i, act.end
		for j < items && end+size(j) <= act.cap {
			end += size(j)
			j++
		}
		if j == i {
			if act.last < act.hdr.first {
				// No entries here yet: grow this segment rather than leave an
				// empty one behind (segment names are first indexes).
				act.cap = act.end + size(i)
				continue
			}
			if err := l.roll(size(i)); err != nil {
				return l.fail(err)
			}
			continue
		}
		if err := l.allocate(act, end); err != nil {
			return l.fail(err)
		}
		if err := l.writeChunk(act, ents, prep, st, i, j, end); err != nil {
			return l.fail(err)
		}
		i = j
	}
	return nil
}

// maxFirstAllocation bounds how much of a new segment its file holds at
// first: all the disk an idle stream takes, instead of a whole segment.
const maxFirstAllocation = 128 << 10

// firstAllocation is a new segment's first step: a sixteenth of a small
// segment, so that the tests' and the simulator's segments grow too.
func (l *Log) firstAllocation() int64 {
	return min(maxFirstAllocation, l.segSize/16)
}

// growthFactor is how much each step multiplies a segment's allocation
// by: 128 KiB, 256 KiB, ... 64 MiB.
const growthFactor = 2

// fitAllocation is the step a segment holding end bytes has reached: the
// first allocation grown until it holds them, at most the segment's size.
func (l *Log) fitAllocation(end, size int64) int64 {
	alloc := l.firstAllocation()
	for alloc < end {
		alloc *= growthFactor
	}
	return min(alloc, max(size, end))
}

// allocate grows s's file to hold end bytes, before the write that needs
// them: in steps of growthFactor up to the segment's size, so that a
// stream's disk follows its data.
//
// Each step costs the next fdatasync a journal commit (the file's size
// changed), about 1.5 ms on the development VM: steps in every segment
// cost measurable throughput, so a segment starts at the allocation its
// predecessor reached (createSegment) and a busy stream takes the steps
// once. That fdatasync makes the new size durable with the records in the
// new room (fdatasync flushes a size change), so an acknowledged record
// never lies beyond the size a crash keeps. A step that finds the disk
// full is a roll that finds it full: the space reserve is given up and
// the step tried again.
func (l *Log) allocate(s *segment, end int64) error {
	if end <= s.allocated {
		return nil
	}
	size := max(min(max(growthFactor*s.allocated, l.firstAllocation()), s.cap), end)
	l.writes++
	if err := l.retryNoSpace(func() error { return s.f.Allocate(size) }); err != nil {
		return err
	}
	s.allocated = size
	l.space.tookSpace()
	return nil
}

// writeChunk encodes items [i, j) into fresh memory (chunkMem: the tail
// cache keeps slices of it, so it is never reused), writes it at act.end
// and publishes the new records to readers.
func (l *Log) writeChunk(act *segment, ents []*pb.Entry, prep []prepEnt, stp *state, i, j int, end int64) error {
	l.assertActiveEnd(act, "before a write")
	l.writes++
	start := act.end
	mem := newChunkMem(planChunk(ents, prep, i, j, act.endOffset))
	last, lastTerm, lastCRC := act.last, act.lastTerm, act.lastCRC
	next, maxTs := act.endOffset, act.maxTs
	rs, ls, cs := l.scrR[:0], l.scrL[:0], l.scrC[:0]
	var st state
	o, borrowed := 0, int64(0)
	for k := i; k < j; k++ {
		if k == len(prep) { // the state record
			rec := mem.shared(int(recSize(stateSize)))
			st = *stp
			st.maxTs = maxTs
			h := recHeader{length: stateSize, typ: recState, term: lastTerm, index: last, base: next, prevCRC: lastCRC}
			h.encode(rec)
			st.encode(rec[recHeaderSize:])
			lastCRC = sealRecord(l.stream, rec, stateSize)
			o += int(recSize(stateSize))
			continue
		}
		p := &prep[k]
		e := ents[k]
		l.assertNextIndex(e.GetIndex(), last)
		n := len(p.payload)
		h := recHeader{length: uint32(n), typ: p.typ, flags: p.flags, term: e.GetTerm(), index: e.GetIndex(),
			base: next, prevCRC: lastCRC}
		if p.typ == recUser {
			h.tag, h.count = TagUser, uint32(p.info.offsets)
		}
		var rec, data []byte // data: the tag and the payload, for the tail cache
		switch {
		case p.borrow:
			data = e.Data[: 1+n : 1+n]
			rec = mem.borrowed(data, int(recSize(n)))
		case ownsPiece(n):
			rec = mem.own(p.payload, int(recSize(n)))
		default:
			rec = mem.shared(int(recSize(n)))
			copy(rec[recHeaderSize:], p.payload)
		}
		h.encode(rec)
		if !p.borrow {
			data = rec[recHeaderSize-1 : recHeaderSize+n : recHeaderSize+n]
		}
		payload := data[1:]
		ce := cacheEnt{term: h.term, base: next, next: next + int64(h.count), typ: p.typ, flags: p.flags}
		if p.typ == recUser {
			if !p.borrow {
				StampBatches(payload, next, h.term) // our copy, never the caller's
			}
			maxTs = max(maxTs, p.info.maxTs)
			ls = append(ls, lidxEnt{base: next, next: ce.next, pos: start + int64(o) + recHeaderSize,
				index: h.index, maxTs: maxTs, length: uint32(n)})
			ce.data = data
		} else if p.flags&flagDataSet != 0 {
			ce.data = payload
		}
		lastCRC = recordCRC(l.stream, rec, payload)
		le.PutUint32(rec, lastCRC)
		if p.borrow {
			borrowed += int64(n)
		}
		rs = append(rs, ridxEnt{pos: start + int64(o), term: h.term, base: next, count: h.count, length: uint32(n)})
		cs = append(cs, ce)
		last, lastTerm, next = h.index, h.term, ce.next
		o += int(recSize(n))
	}
	if int64(o) != end-start || mem.used != len(mem.small) {
		l.invariantf("before a write: records of %d bytes (%d of %d shared) planned as %d", o, mem.used, len(mem.small), end-start)
	}
	failpoint.Inject("beforeWrite", func(val failpoint.Value) {
		failpoints.Hit("storage/beforeWrite")
		failpoints.CrashOn(val)
		if failpoints.EIO(val) {
			failpoint.Return(failpoints.IOError())
		}
	})
	failpoint.Inject("tornWrite", func(val failpoint.Value) {
		failpoints.Hit("storage/tornWrite")
		// return(true): half the chunk; return(n): its first n bytes.
		torn := -1
		if failpoints.Bool(val) {
			torn = int(end-start) / 2
		} else if n, ok := failpoints.Int(val); ok && n >= 0 {
			torn = min(n, int(end-start)-1)
		}
		if torn >= 0 {
			_, _ = act.f.WriteAt(mem.joined()[:torn], start)
			failpoints.Crash()
		}
	})
	if err := vfs.WriteAtv(act.f, mem.pieces, start); err != nil {
		return err
	}
	l.stats.written.Add(end - start)
	l.stats.borrowed.Add(borrowed)
	failpoint.Inject("afterWrite", func(val failpoint.Value) {
		failpoints.Hit("storage/afterWrite")
		failpoints.CrashOn(val)
	})
	l.mu.Lock()
	l.ridx = append(l.ridx, rs...)
	l.lidx = append(l.lidx, ls...)
	for k := range cs {
		l.cache.add(act.last+1+uint64(k), cs[k])
	}
	if b := l.cache.budget; b != nil && len(cs) > 0 {
		l.lastWrite.Store(b.clock.Add(1))
		b.makeRoom(l)
	}
	act.last, act.lastTerm, act.lastCRC, act.end, act.endOffset, act.maxTs = last, lastTerm, lastCRC, end, next, maxTs
	if j > len(prep) {
		l.st = st
	}
	l.mu.Unlock()
	// Checked outside mu: the writer's lock keeps the active segment still.
	l.assertActiveEnd(act, "after a write")
	clear(cs) // drop references to buf from the scratch slice
	l.scrR, l.scrL, l.scrC = rs, ls, cs
	return nil
}

// stateRecord encodes the current state as a record following the
// active segment's last record.
func (l *Log) stateRecord(act *segment, st state) ([]byte, uint32) {
	rec := make([]byte, recSize(stateSize))
	h := recHeader{length: stateSize, typ: recState, term: act.lastTerm, index: act.last, base: act.endOffset, prevCRC: act.lastCRC}
	h.encode(rec)
	st.encode(rec[recHeaderSize:])
	return rec, sealRecord(l.stream, rec, stateSize)
}

// roll closes the active segment and starts the next, big enough for a
// record of need bytes. The old segment is synced first so that no newer
// segment ever holds durable data while an older one has a torn tail.
func (l *Log) roll(need int64) error {
	failpoint.Inject("segmentRoll", func(val failpoint.Value) {
		failpoints.Hit("storage/segmentRoll")
		failpoints.CrashOn(val)
		if failpoints.EIO(val) {
			failpoint.Return(failpoints.IOError())
		}
	})
	old := l.active()
	if err := old.f.Sync(); err != nil {
		return err
	}
	if !l.keepPageCache {
		l.uncache = append(l.uncache, old)
	}
	// old goes to the file cache with its files open: make room first, so
	// the cache's bound holds while its index files are created.
	l.files.reserve()
	if err := l.retryNoSpace(func() error { return old.writeIndexFiles(l.fs, l.stream, l.ridx, l.lidx) }); err != nil {
		l.files.unreserve()
		return err
	}
	var ns *segment
	if err := l.retryNoSpace(func() (err error) {
		ns, err = l.createSegment(old, need)
		return err
	}); err != nil {
		l.files.unreserve()
		return err
	}
	l.space.tookSpace()
	// The next segment likely holds about as many entries: growing its
	// indexes from nothing would copy them over and over.
	ridx, lidx := make([]ridxEnt, 0, cap(l.ridx)), make([]lidxEnt, 0, cap(l.lidx))
	l.mu.Lock()
	l.segs = append(l.segs, ns)
	l.ridx, l.lidx = ridx, lidx
	l.mu.Unlock()
	l.files.adopt(old)
	return nil
}

// createSegment creates the segment following prev (which may be a
// stand-in holding only the end position) and writes its header and a
// state record repeating the current state.
func (l *Log) createSegment(prev *segment, need int64) (*segment, error) {
	first := prev.last + 1
	size := max(l.segSize, segHeaderSize+2*recSize(stateSize)+need)
	// A stream that filled its last segment will likely fill this one:
	// it starts where the last one's allocation ended (docs/storage.md).
	alloc := min(size, max(l.firstAllocation(), prev.allocated, segHeaderSize+2*recSize(stateSize)+need))
	s := &segment{
		base: segBase(l.dir, first), cap: size, allocated: alloc, files: l.files, fs: l.fs,
		hdr: segHeader{stream: l.stream, first: first, firstOffset: prev.endOffset, prevTerm: prev.lastTerm,
			size: size, chainCRC: prev.lastCRC},
		last: prev.last, lastTerm: prev.lastTerm, lastCRC: prev.lastCRC, end: segHeaderSize,
		endOffset: prev.endOffset, maxTs: prev.maxTs, startMaxTs: prev.maxTs,
	}
	f, err := l.fs.Create(s.base + ".seg")
	if err != nil {
		return nil, err
	}
	s.f = f
	l.dirDirty = true
	if err := f.Allocate(alloc); err != nil {
		_ = f.Close()
		return nil, err
	}
	st := l.st
	st.maxTs = prev.maxTs
	rec, crc := l.stateRecord(s, st)
	buf := make([]byte, segHeaderSize+len(rec))
	s.hdr.encode(buf)
	copy(buf[segHeaderSize:], rec)
	if _, err := f.WriteAt(buf, 0); err != nil {
		_ = f.Close()
		return nil, err
	}
	s.end, s.lastCRC = int64(len(buf)), crc
	return s, nil
}

// truncate removes entries >= first (a Raft conflict). Entries are
// written again right after, so the cut is made durable here: the stale
// bytes are zeroed and a state record is put at the cut, then synced. A
// crash can then neither resurrect a truncated entry nor lose the hard
// state a truncated state record held. Truncations are rare (leader
// changes with an uncommitted tail), so the fsync is off the hot path.
func (l *Log) truncate(first uint64) error {
	// The hard state goes to the meta file first, durably, with the
	// entries its commit covers: whatever the truncation destroys, and
	// whenever it is interrupted, Open still finds it.
	if st := (state{term: l.st.term, vote: l.st.vote, commit: l.st.commit, applied: l.st.applied}); st != l.meta.st {
		m := l.meta
		if err := l.active().f.Sync(); err != nil {
			return err
		}
		m.st = st
		if err := saveMeta(l.fs, l.dir, &m); err != nil {
			return err
		}
		l.mu.Lock()
		l.meta = m
		l.mu.Unlock()
	}
	k := len(l.segs) - 1
	for k > 0 && l.segs[k].hdr.first > first {
		k--
	}
	s := l.segs[k]
	ridx, lidx := l.ridx, l.lidx
	if k != len(l.segs)-1 {
		// s is to be the active segment again: its files leave the cache,
		// open, for the writer.
		if err := s.reclaim(); err != nil {
			return err
		}
		sc, err := scanSegment(s.f, s, l.stream, s.allocated, nil)
		if err != nil {
			return err
		}
		if sc.last != s.last {
			return fmt.Errorf("%w: %s changed under the log", ErrCorrupt, s.base+".seg")
		}
		ridx, lidx = sc.ridx, sc.lidx
		s.startMaxTs = sc.startMaxTs
	}
	ci := first - s.hdr.first
	cut := ridx[ci]
	var hb [recHeaderSize]byte
	if err := preadFull(s.f, hb[:], cut.pos); err != nil {
		return err
	}
	h := decodeRecHeader(hb[:])
	if h.index != first {
		return fmt.Errorf("%w: %s: record at %d has index %d, want %d", ErrCorrupt, s.base+".seg", cut.pos, h.index, first)
	}
	nl := len(lidx)
	for nl > 0 && lidx[nl-1].index >= first {
		nl--
	}
	maxTs := s.startMaxTs
	if nl > 0 {
		maxTs = lidx[nl-1].maxTs
	}
	lastTerm := s.hdr.prevTerm
	if ci > 0 {
		lastTerm = ridx[ci-1].term
	}
	oldEnd := s.end

	l.mu.Lock()
	removed := l.segs[k+1:]
	l.segs = l.segs[:k+1]
	l.ridx, l.lidx = ridx[:ci], lidx[:nl]
	l.cache.truncate(first)
	s.last, s.lastTerm, s.lastCRC, s.end, s.endOffset, s.maxTs = first-1, lastTerm, h.prevCRC, cut.pos, cut.base, maxTs
	l.mu.Unlock()

	for i := len(removed) - 1; i >= 0; i-- { // newest first: a crash leaves a prefix
		r := removed[i]
		r.retire()
		r.dropIndexFiles(l.fs)
		if err := l.fs.Remove(r.base + ".seg"); err != nil {
			return err
		}
	}
	if len(removed) > 0 || s.ridxF != nil {
		s.dropIndexFiles(l.fs)
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}

	// Zero the stale bytes, with the current state at the cut if it fits.
	st := l.st
	st.maxTs = maxTs
	var rec []byte
	var crc uint32
	if s.end+recSize(stateSize) <= s.cap {
		rec, crc = l.stateRecord(s, st)
	}
	if rec != nil {
		if err := l.allocate(s, s.end+int64(len(rec))); err != nil {
			return err
		}
		if _, err := s.f.WriteAt(rec, s.end); err != nil {
			return err
		}
	}
	const chunk = 1 << 20
	zeros := make([]byte, min(chunk, max(oldEnd-s.end, 0)))
	for off := s.end + int64(len(rec)); off < oldEnd; off += chunk {
		if _, err := s.f.WriteAt(zeros[:min(chunk, oldEnd-off)], off); err != nil {
			return err
		}
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	if rec == nil {
		// No room for the state here: the next segment starts with it.
		if err := l.roll(0); err != nil {
			return err
		}
		if err := l.active().f.Sync(); err != nil {
			return err
		}
		return l.fs.SyncDir(l.dir)
	}
	l.mu.Lock()
	s.end, s.lastCRC = s.end+int64(len(rec)), crc
	l.mu.Unlock()
	return nil
}
