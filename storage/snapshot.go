package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A VDL Raft snapshot stands for the log itself: its metadata is the
// leader's last durably applied entry (so the membership it carries is
// current and includes any server just added), and its Data describes
// where the leader's log starts: first index, the term before it, the
// Kafka start offset and the membership history since. A follower
// installing it rebuilds the same log: it starts an empty log at that
// first index and copies the entries up to the snapshot index from the
// leader (the "segment shipping" of the design, entry by entry, sequential
// reads on the leader); normal replication continues after it. Version 3
// adds the sender's saved producer state (producers.go), which the
// installing replica keeps if it is newer than its own: the producer state
// of a log is a function of all of it, and the entries before the sender's
// first index are not copied.

const snapshotDataVersion = 3

// maxSnapshotProducers bounds the producer state a snapshot carries (it
// travels in the MsgSnap frame): a larger one stays behind, and the
// installing replica rebuilds what it can from the entries it copies.
const maxSnapshotProducers = 4 << 20

// snapDesc is what a snapshot's Data holds.
type snapDesc struct {
	first    uint64 // the leader's first index
	prevTerm uint64 // term of first-1
	start    int64  // Kafka offset of the first record at first
	logStart int64  // the replicated retention point
	confs    []confEntry
	config   streamConfig  // the replicated config (absent from older snapshots)
	prod     producerState // the sender's saved producer state (v3)
}

func (d *snapDesc) encode() ([]byte, error) {
	b := make([]byte, 0, 64)
	b = append(b, snapshotDataVersion)
	b = binary.BigEndian.AppendUint64(b, d.first)
	b = binary.BigEndian.AppendUint64(b, d.prevTerm)
	b = binary.BigEndian.AppendUint64(b, uint64(d.start))
	b = binary.BigEndian.AppendUint64(b, uint64(d.logStart))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.confs)))
	for _, c := range d.confs {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.cs)
		if err != nil {
			return nil, err
		}
		b = binary.BigEndian.AppendUint64(b, c.index)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		b = append(b, data...)
	}
	b = binary.BigEndian.AppendUint64(b, d.prod.index)
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.prod.data)))
	b = append(b, d.prod.data...)
	return d.config.appendTo(b), nil
}

func decodeSnapDesc(b []byte) (snapDesc, error) {
	var d snapDesc
	bad := func(why string) (snapDesc, error) {
		return snapDesc{}, fmt.Errorf("%w: snapshot data: %s", ErrBadEntry, why)
	}
	if len(b) < 37 || (b[0] != snapshotDataVersion && b[0] != 2) {
		return bad("bad header")
	}
	d.first = binary.BigEndian.Uint64(b[1:])
	d.prevTerm = binary.BigEndian.Uint64(b[9:])
	d.start = int64(binary.BigEndian.Uint64(b[17:]))
	d.logStart = int64(binary.BigEndian.Uint64(b[25:]))
	n := binary.BigEndian.Uint32(b[33:])
	p := b[37:]
	for i := uint32(0); i < n; i++ {
		if len(p) < 12 {
			return bad("truncated")
		}
		idx, l := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		p = p[12:]
		if uint64(l) > uint64(len(p)) {
			return bad("truncated")
		}
		cs := &pb.ConfState{}
		if err := proto.Unmarshal(p[:l], cs); err != nil {
			return bad(err.Error())
		}
		p = p[l:]
		if len(d.confs) > 0 && idx <= d.confs[len(d.confs)-1].index {
			return bad("membership history out of order")
		}
		d.confs = append(d.confs, confEntry{index: idx, cs: cs})
	}
	if b[0] >= 3 {
		if len(p) < 12 {
			return bad("truncated producer state")
		}
		idx, l := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		p = p[12:]
		if uint64(l) > uint64(len(p)) || (l > 0) != (idx > 0) {
			return bad("bad producer state")
		}
		if l > 0 {
			d.prod = producerState{index: idx, data: p[:l]}
		}
		p = p[l:]
	}
	if len(p) > 0 { // the replicated config, after the producer state from v3 on
		c, _, err := decodeStreamConfig(p)
		if err != nil {
			return bad(err.Error())
		}
		d.config = c
	}
	if d.first == 0 || d.start < 0 {
		return bad("bad first index or start offset")
	}
	return d, nil
}

// Snapshot implements raft.Storage: the snapshot is taken at the last
// durably applied entry (never before the log start).
func (l *Log) Snapshot() (*pb.Snapshot, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	first := l.segs[0].hdr.first
	idx := max(l.durableApplied.Load(), first-1)
	idx = min(idx, l.active().last)
	term, err := l.termLocked(idx)
	if err != nil {
		return nil, err
	}
	d := snapDesc{first: first, prevTerm: l.segs[0].hdr.prevTerm, start: l.segs[0].hdr.firstOffset, logStart: l.meta.logStart,
		config: l.meta.config}
	if len(l.prod.data) <= maxSnapshotProducers {
		d.prod = l.prod
	} else {
		l.log().Warn("producer state too large to ship with a snapshot: the installing replica rebuilds it from the entries it copies",
			"bytes", len(l.prod.data), "limit", maxSnapshotProducers)
	}
	for i, c := range l.confs { // the membership in force at first-1, and every change since
		if c.index >= first || i == len(l.confs)-1 || l.confs[i+1].index > first-1 {
			d.confs = append(d.confs, c)
		}
	}
	data, err := d.encode()
	if err != nil {
		return nil, err
	}
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: new(idx), Term: new(term), ConfState: confAt(l.confs, idx),
	}, Data: data}, nil
}

// EntrySource returns the entries [from, to] of a snapshot's log, in
// order, as many as it likes per call (at least one), with the term of the
// entry before from. Drivers implement it by reading a replica's committed
// entries (Log.CommittedEntries; over the network in production), so every
// entry a source returns is one of the committed log's.
type EntrySource func(from, to uint64) (ents []*pb.Entry, prevTerm uint64, err error)

// ErrDiverged: a snapshot source answered entries that do not continue
// what the install already holds (the term before them differs). The
// install stops; the driver tries again, from another replica.
var ErrDiverged = errors.New("storage: snapshot entries do not continue the log being installed")

// InstallSnapshot replaces the whole log with the one the snapshot stands
// for: an empty log at the snapshot's first index, filled with the entries
// up to the snapshot index from src, then synced. It is durable on return.
// A crash part way leaves either the old log or a prefix of the new one;
// both are valid Raft logs that replication continues from.
func (l *Log) InstallSnapshot(snap *pb.Snapshot, src EntrySource) error {
	md := snap.GetMetadata()
	idx := md.GetIndex()
	if idx == 0 {
		return errors.New("storage: empty snapshot")
	}
	d, err := decodeSnapDesc(snap.GetData())
	if err != nil {
		return err
	}
	if d.first > idx+1 {
		return fmt.Errorf("%w: snapshot at %d but its log starts at %d", ErrBadEntry, idx, d.first)
	}
	// Entries we already hold that the leader's log has too are kept: we
	// may have acknowledged them, and a crash part way through the copy
	// must not lose them (a replica that forgets what it acknowledged can
	// lose committed entries). Only with no such overlap is the log reset.
	next := d.first
	k, overlap, err := l.matchPoint(d, idx, src)
	switch {
	case err != nil:
		return err
	case overlap:
		if err := l.keepConfs(k, d.confs); err != nil {
			return err
		}
		next = k + 1 // the first Write cuts a divergent suffix after k
	default:
		if err := l.reset(d, md.GetTerm()); err != nil {
			return err
		}
	}
	for next <= idx {
		if src == nil {
			return fmt.Errorf("storage: snapshot at %d needs entries from %d but has no source", idx, next)
		}
		ents, prevTerm, err := src(next, idx)
		if err != nil {
			return fmt.Errorf("storage: fetching snapshot entries from %d: %w", next, err)
		}
		if len(ents) == 0 || ents[0].GetIndex() != next {
			return fmt.Errorf("storage: snapshot source answered %d entries not starting at %d", len(ents), next)
		}
		// Every chunk must continue what is already here: a source with
		// another history (an old leader's uncommitted suffix) is refused,
		// never spliced in.
		if held, err := l.Term(next - 1); err != nil || held != prevTerm {
			return fmt.Errorf("%w: entry %d has term %d here (err %v), the source's %d", ErrDiverged, next-1, held, err, prevTerm)
		}
		if last := ents[len(ents)-1].GetIndex(); last > idx {
			ents = ents[:idx-next+1]
		}
		if err := l.Write(ents, nil); err != nil {
			return err
		}
		next = ents[len(ents)-1].GetIndex() + 1
	}
	if t, err := l.Term(idx); err != nil || t != md.GetTerm() {
		return fmt.Errorf("%w: snapshot entry %d has term %d (err %v), want %d", ErrCorrupt, idx, t, err, md.GetTerm())
	}
	if overlap {
		// What the leader's replicas deleted (replicated retention) goes here
		// too; the reset path starts from it.
		if _, err := l.DeleteBefore(d.logStart); err != nil {
			return err
		}
	}
	// The config commands below the leader's log start are gone: their
	// result comes with the snapshot.
	if err := l.adoptConfig(d.config); err != nil {
		return err
	}
	// The sender's producer state, if newer than ours (both are states of
	// the committed log: the newer needs fewer of its entries).
	if d.prod.data != nil {
		l.wmu.Lock()
		err := l.checkWriter()
		if err == nil {
			err = l.saveProducers(d.prod)
		}
		l.wmu.Unlock()
		if err != nil {
			return err
		}
	}
	// Commit and applied move to the snapshot index only now that the
	// entries are here: a crash before leaves a shorter, still valid log.
	l.SetApplied(idx)
	hs := &pb.HardState{Term: new(max(l.st.term, md.GetTerm())), Vote: new(l.st.vote), Commit: new(max(l.st.commit, idx))}
	if err := l.Write(nil, hs); err != nil {
		return err
	}
	if _, err := l.Sync(); err != nil {
		return err
	}
	return nil
}

// matchPoint finds the highest index k of our log, from the leader's log
// start - 1 up to the snapshot index, whose entry is the leader's (the same
// term; by Raft's log matching, so is every entry before it). overlap is
// false when there is none.
func (l *Log) matchPoint(d snapDesc, idx uint64, src EntrySource) (k uint64, overlap bool, err error) {
	first, err := l.FirstIndex()
	if err != nil {
		return 0, false, err
	}
	last, err := l.LastIndex()
	if err != nil {
		return 0, false, err
	}
	lo, hi := max(d.first-1, first-1), min(last, idx)
	if lo > hi {
		return 0, false, nil
	}
	match := func(k uint64) (bool, error) {
		ours, err := l.Term(k)
		if err != nil {
			return false, err
		}
		theirs := d.prevTerm
		if k >= d.first {
			if src == nil {
				return false, fmt.Errorf("storage: snapshot at %d needs entry %d but has no source", idx, k)
			}
			ents, _, err := src(k, k)
			if err != nil {
				return false, fmt.Errorf("storage: fetching snapshot entry %d: %w", k, err)
			}
			if len(ents) == 0 || ents[0].GetIndex() != k {
				return false, fmt.Errorf("storage: snapshot source answered %d entries not starting at %d", len(ents), k)
			}
			theirs = ents[0].GetTerm()
		}
		return ours == theirs, nil
	}
	if ok, err := match(hi); err != nil || ok { // usually: we are only behind
		return hi, ok, err
	}
	if ok, err := match(lo); err != nil || !ok {
		return 0, false, err
	}
	for hi-lo > 1 { // match(lo) holds, match(hi) does not
		mid := lo + (hi-lo)/2
		ok, err := match(mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true, nil
}

// keepConfs takes the leader's membership history (from the snapshot)
// and keeps ours only before it starts. Ours can lack a change inside the
// matching prefix [.., k]: a replica records a change when it applies it,
// and one behind on its commit wrote the entry without applying it. The
// leader's history covers the committed log from its log start on, which
// matches ours up to k, so where both have a record they agree.
func (l *Log) keepConfs(k uint64, leader []confEntry) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	from := uint64(math.MaxUint64)
	if len(leader) > 0 {
		from = leader[0].index
	}
	var confs []confEntry
	for _, c := range l.confs {
		if c.index <= k && c.index < from {
			confs = append(confs, c)
		}
	}
	for _, c := range leader {
		confs = append(confs, confEntry{index: c.index, cs: proto.Clone(pb.EnsureConfState(c.cs)).(*pb.ConfState)})
	}
	return l.setConfs(confs)
}

// reset replaces the log with an empty one starting at d.first. The new
// start and the hard state go to the meta file first; a crash part way
// leaves segments with none at the retention point, which Open recognises
// and finishes (see recover).
func (l *Log) reset(d snapDesc, snapTerm uint64) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	st := l.st
	st.term = max(st.term, snapTerm, d.prevTerm)
	// The old entries are gone: commit and applied restart at the new log's
	// start (raft requires commit <= last index; both are hints it re-learns).
	st.commit, st.applied, st.maxTs = d.first-1, d.first-1, -1
	m := l.meta
	m.retFirst, m.retPrevTerm, m.retStart, m.logStart = d.first, d.prevTerm, d.start, d.logStart
	m.confs = nil
	for _, c := range d.confs {
		m.confs = append(m.confs, confEntry{index: c.index, cs: proto.Clone(pb.EnsureConfState(c.cs)).(*pb.ConfState)})
	}
	m.st = st
	if err := saveMeta(l.fs, l.dir, &m); err != nil {
		return l.fail(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.segs
	l.segs = nil
	l.ridx, l.lidx = nil, nil
	l.cache.reset()
	l.meta, l.confs, l.st = m, m.confs, st
	for _, s := range old {
		s.retire()
		dropSegFiles(l.fs, s.base)
	}
	if err := l.createFirst(); err != nil {
		return l.fail(err)
	}
	return nil
}
