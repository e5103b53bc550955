// Package producers is the idempotent-producer state of one stream (Kafka's
// ProducerStateManager): per producer id, its epoch, the time of its last
// batch and where its last five batches are in the log (their sequence
// ranges, Raft index and term, offset). It is a deterministic function of
// the log: Table.Apply folds the batches of one Raft entry in, in log
// order, reading only the batches' own producerId / producerEpoch /
// baseSequence / lastOffsetDelta / maxTimestamp fields, so every replica that
// holds the same log holds the same table.
//
// The decision whether a produced batch is appended, answered as a
// duplicate or refused (Check) is made by the stream's leader when the
// batch is proposed, against the table of its whole Raft log (committed or
// not) plus the proposals queued before it (raftnode.Core keeps both). The
// log itself is never filtered: a batch refused or answered as a duplicate
// never enters it. See docs/kafka.md "Idempotent producers".
//
// Expiry is deterministic too: a producer whose last batch's timestamp is
// more than the expiration older than the largest batch timestamp the table
// has seen (its Clock: the log's time, not a local clock) is forgotten.
package producers

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// Window is how many of a producer's latest batches are kept: a retry of
// any of them is answered with its original offsets (Kafka keeps five,
// the most requests a client may have in flight with idempotence).
const Window = 5

// DefaultExpirationMs is how long a producer's state outlives its last
// batch by default: 1 day, Kafka's producer.id.expiration.ms /
// transactional.id.expiration.ms.
const DefaultExpirationMs = 24 * 60 * 60 * 1000

// Batch is what the state machine reads of one batch.
type Batch struct {
	ID       int64 // producerId (>= 0: the batch is idempotent)
	Epoch    int16
	FirstSeq int32
	LastSeq  int32 // FirstSeq + lastOffsetDelta, wrapping at MaxInt32 as Kafka's sequences do
	MaxTs    int64
	Delta    int64 // offset of its first record from the start of its entry (or proposal)
	Count    int32 // offsets it takes: lastOffsetDelta + 1
}

// Parse walks the headers of whole v2 batches (validated before: a user
// entry's payload or a produce's records) and appends the idempotent ones
// (producerId >= 0) to out. It returns them, the offsets all the batches
// take and their largest maxTimestamp (math.MinInt64 if none). A truncated
// tail is ignored.
func Parse(data []byte, out []Batch) (batches []Batch, offsets int64, maxTs int64) {
	maxTs = math.MinInt64
	for len(data) >= batchfmt.HeaderSize {
		n := batchfmt.LengthOverhead + int(batchfmt.BatchLength(data))
		if n < batchfmt.HeaderSize || n > len(data) {
			break
		}
		d := batchfmt.LastOffsetDelta(data)
		ts := batchfmt.MaxTimestamp(data)
		maxTs = max(maxTs, ts)
		if id := int64(binary.BigEndian.Uint64(data[batchfmt.OffProducerID:])); id >= 0 {
			first := int32(binary.BigEndian.Uint32(data[batchfmt.OffBaseSequence:]))
			out = append(out, Batch{
				ID: id, Epoch: int16(binary.BigEndian.Uint16(data[batchfmt.OffProducerEpoch:])),
				FirstSeq: first, LastSeq: lastSeq(first, d), MaxTs: ts, Delta: offsets, Count: d + 1,
			})
		}
		offsets += int64(d) + 1
		data = data[n:]
	}
	return out, offsets, maxTs
}

// lastSeq is the sequence of a batch's last record (Kafka's
// DefaultRecordBatch.incrementSequence).
func lastSeq(first, delta int32) int32 {
	if first < 0 || delta < 0 {
		return first
	}
	if first > math.MaxInt32-delta {
		return delta - (math.MaxInt32 - first) - 1
	}
	return first + delta
}

// inSequence reports whether next follows last (sequences wrap to 0).
func inSequence(last, next int32) bool {
	return next == last+1 || (next == 0 && last == math.MaxInt32)
}

// Loc is where one of a producer's batches is.
type Loc struct {
	FirstSeq, LastSeq int32
	Count             int32  // offsets it takes
	Index             uint64 // Raft index of its entry; 0 while its proposal is queued
	Term              uint64 // term of its entry
	Delta             int64  // offset from the start of its entry (queued: of its proposal)
	Offset            int64  // its base offset once known (applied), else -1
	Prop              uint64 // the queued proposal holding it (0: in the log)
}

// Producer is the state of one producer id.
type Producer struct {
	Epoch   int16
	LastTs  int64 // largest maxTimestamp of its batches
	Batches []Loc // oldest first, at most Window
}

// LastSeq is the sequence of its last record.
func (p *Producer) LastSeq() int32 { return p.Batches[len(p.Batches)-1].LastSeq }

// find returns its batch with exactly that sequence range.
func (p *Producer) find(first, last int32) (Loc, bool) {
	for _, l := range p.Batches {
		if l.FirstSeq == first && l.LastSeq == last {
			return l, true
		}
	}
	return Loc{}, false
}

func (p *Producer) clone() *Producer {
	c := *p
	c.Batches = slices.Clone(p.Batches)
	return &c
}

// add records a batch of the producer's current epoch.
func (p *Producer) add(l Loc, ts int64) {
	if len(p.Batches) == Window {
		copy(p.Batches, p.Batches[1:])
		p.Batches = p.Batches[:Window-1]
	}
	p.Batches = append(p.Batches, l)
	p.LastTs = max(p.LastTs, ts)
}

// Table is the producers of one stream as of a point of its log.
type Table struct {
	// Index is the last Raft index folded in (entries at or below it are
	// skipped by Apply).
	Index uint64
	// Clock is the largest batch timestamp folded in (ms): the log's time,
	// against which producers expire.
	Clock int64
	// Expiration is how long (ms) a producer outlives its last batch.
	Expiration int64

	m      map[int64]*Producer
	parent *Table // an overlay's base (read-only through the overlay)
}

// New returns an empty table.
func New(expirationMs int64) *Table {
	return &Table{Clock: math.MinInt64, Expiration: expirationMs}
}

// set records a producer's state. The map is made on the first write: a
// server hosts thousands of idle streams whose tables stay empty, and
// every object they hold is marked by every collection.
func (t *Table) set(id int64, p *Producer) {
	if t.m == nil {
		t.m = map[int64]*Producer{}
	}
	t.m[id] = p
}

// Clone returns an independent copy.
func (t *Table) Clone() *Table {
	c := &Table{Index: t.Index, Clock: t.Clock, Expiration: t.Expiration}
	if n := t.Len(); n > 0 {
		c.m = make(map[int64]*Producer, n)
	}
	for _, id := range t.ids() {
		c.m[id] = t.lookup(id).clone()
	}
	return c
}

// Overlay returns a table that reads t and writes only itself: the
// leader's view of its log plus the proposals not yet in it. t must not
// change while the overlay is used.
func (t *Table) Overlay() *Table {
	return &Table{Index: t.Index, Clock: t.Clock, Expiration: t.Expiration, parent: t}
}

// lookup returns a producer's state, expired or not.
func (t *Table) lookup(id int64) *Producer {
	if p, ok := t.m[id]; ok {
		return p
	}
	if t.parent != nil {
		return t.parent.lookup(id)
	}
	return nil
}

// expired reports whether p is forgotten at clock.
func (t *Table) expired(p *Producer, clock int64) bool {
	return t.Expiration > 0 && clock != math.MinInt64 && p.LastTs < clock-t.Expiration
}

// Get returns a producer's state, nil if it has none or it expired.
func (t *Table) Get(id int64) *Producer {
	p := t.lookup(id)
	if p == nil || t.expired(p, t.Clock) {
		return nil
	}
	return p
}

// ids returns the producer ids held (expired ones included), sorted.
func (t *Table) ids() []int64 {
	var ids []int64
	for id := range t.m {
		ids = append(ids, id)
	}
	if t.parent != nil {
		for _, id := range t.parent.ids() {
			if _, ok := t.m[id]; !ok {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// Len returns how many producers are held (expired ones not yet purged
// included).
func (t *Table) Len() int {
	if t.parent == nil {
		return len(t.m)
	}
	return len(t.ids())
}

// Producers returns the live producers' ids, sorted.
func (t *Table) Producers() []int64 {
	var out []int64
	for _, id := range t.ids() {
		if t.Get(id) != nil {
			out = append(out, id)
		}
	}
	return out
}

// Purge drops expired producers (their absence changes nothing: Get and
// Apply treat them as unknown already). Not for overlays.
func (t *Table) Purge() {
	for id, p := range t.m {
		if t.expired(p, t.Clock) {
			delete(t.m, id)
		}
	}
}

// writable returns a producer's state to change (an overlay's own copy).
func (t *Table) writable(id int64) *Producer {
	if p, ok := t.m[id]; ok {
		return p
	}
	if t.parent != nil {
		if p := t.parent.lookup(id); p != nil {
			c := p.clone()
			t.set(id, c)
			return c
		}
	}
	return nil
}

// Where places a batch being folded in: its entry, or its queued proposal.
type Where struct {
	Index, Term uint64
	Base        int64  // base offset of the entry (proposal: -1)
	Prop        uint64 // queued proposal id (0: an entry)
}

// Apply folds in the batches of one log entry (or, on an overlay, of one
// queued proposal) whose largest batch timestamp is maxTs. The log is the
// truth: nothing is refused here. A batch of an older epoch than its
// producer's (a log written without the leader's check) is not recorded;
// a newer epoch, an unknown or an expired producer starts afresh.
func (t *Table) Apply(w Where, batches []Batch, maxTs int64) {
	if w.Prop == 0 {
		if w.Index <= t.Index {
			return
		}
		t.Index = w.Index
	}
	for _, b := range batches {
		// The clock moves batch by batch, as Check sees it.
		t.Clock = max(t.Clock, b.MaxTs)
		p := t.writable(b.ID)
		if p != nil && t.expired(p, t.Clock) {
			p = nil
		}
		switch {
		case p == nil || b.Epoch > p.Epoch:
			p = &Producer{Epoch: b.Epoch, LastTs: math.MinInt64}
			t.set(b.ID, p)
		case b.Epoch < p.Epoch:
			continue
		}
		off := int64(-1)
		if w.Base >= 0 && w.Prop == 0 {
			off = w.Base + b.Delta
		}
		p.add(Loc{FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, Count: b.Count, Index: w.Index, Term: w.Term,
			Delta: b.Delta, Offset: off, Prop: w.Prop}, b.MaxTs)
	}
	t.Clock = max(t.Clock, maxTs) // the other batches' times count from the end of the entry
}

// Verdict is the leader's decision on a produced batch.
type Verdict int

// Verdicts.
const (
	// Append: the batch is new and in sequence.
	Append Verdict = iota
	// Duplicate: the batch is one of the producer's last five (exact
	// sequence range): answer with where it is, write nothing.
	Duplicate
	// OutOfOrder: a gap (or a new epoch not starting at 0):
	// OUT_OF_ORDER_SEQUENCE_NUMBER.
	OutOfOrder
	// StaleEpoch: an epoch older than the producer's: INVALID_PRODUCER_EPOCH.
	StaleEpoch
	// UnknownProducer: no state (never seen, or expired) and a sequence
	// other than 0: UNKNOWN_PRODUCER_ID.
	UnknownProducer
)

func (v Verdict) String() string {
	switch v {
	case Append:
		return "append"
	case Duplicate:
		return "duplicate"
	case OutOfOrder:
		return "out-of-order"
	case StaleEpoch:
		return "stale-epoch"
	case UnknownProducer:
		return "unknown-producer"
	}
	return "?"
}

// Check decides on one produced batch against the table (the leader's log
// and the proposals queued before it) whose clock is advanced to the
// batch's own timestamp first: a producer that was idle longer than the
// expiration is unknown, whatever else was written meanwhile. Kafka's
// ProducerAppendInfo rules: an older epoch is fenced; a newer epoch must
// start at sequence 0; the same epoch must continue the last sequence
// unless the batch is one of the last five (a retry).
func (t *Table) Check(b Batch) (Verdict, Loc) {
	if b.Epoch < 0 || b.FirstSeq < 0 {
		return OutOfOrder, Loc{}
	}
	p := t.lookup(b.ID)
	if p != nil && t.expired(p, max(t.Clock, b.MaxTs)) {
		p = nil
	}
	switch {
	case p == nil && b.FirstSeq != 0:
		return UnknownProducer, Loc{}
	case p == nil:
		return Append, Loc{}
	case b.Epoch < p.Epoch:
		return StaleEpoch, Loc{}
	case b.Epoch > p.Epoch && b.FirstSeq != 0:
		return OutOfOrder, Loc{}
	case b.Epoch > p.Epoch:
		return Append, Loc{}
	}
	if l, ok := p.find(b.FirstSeq, b.LastSeq); ok {
		return Duplicate, l
	}
	if !inSequence(p.LastSeq(), b.FirstSeq) {
		return OutOfOrder, Loc{}
	}
	return Append, Loc{}
}

// Decision is the leader's decision on a whole produced record set.
type Decision struct {
	Verdict Verdict
	// Duplicate: where the set's first and last batches are.
	First, Last Loc
	// The batch the verdict is about (errors; a duplicate's first).
	Batch Batch
}

// Propose decides on a produced record set (its idempotent batches, in
// order) and, when it is appended, folds it into the table (an overlay)
// as queued proposal prop. A set whose first batch is a duplicate must be
// a duplicate throughout, of batches of one entry or proposal (a retry of
// one request); otherwise every batch must be appendable, each after the
// ones before it.
func (t *Table) Propose(prop uint64, batches []Batch, maxTs int64) Decision {
	if len(batches) == 0 {
		return Decision{Verdict: Append}
	}
	v, l := t.Check(batches[0])
	if v == Duplicate {
		d := Decision{Verdict: Duplicate, First: l, Last: l, Batch: batches[0]}
		for _, b := range batches[1:] {
			v, l := t.Check(b)
			if v != Duplicate || l.Prop != d.First.Prop || l.Index != d.First.Index || l.Term != d.First.Term {
				// Not a retry of one request: its batches were one proposal.
				return Decision{Verdict: OutOfOrder, Batch: b}
			}
			d.Last = l
		}
		return d
	}
	if v != Append {
		return Decision{Verdict: v, Batch: batches[0]}
	}
	if len(batches) > 1 {
		// Later batches are checked after the earlier ones, on a scratch
		// overlay so that a refusal leaves t as it was.
		s := t.Overlay()
		s.Apply(Where{Prop: prop, Base: -1}, batches[:1], batches[0].MaxTs)
		for i, b := range batches[1:] {
			if v, _ := s.Check(b); v != Append {
				return Decision{Verdict: v, Batch: b}
			}
			s.Apply(Where{Prop: prop, Base: -1}, batches[1+i:2+i], b.MaxTs)
		}
	}
	t.Apply(Where{Prop: prop, Base: -1}, batches, maxTs)
	return Decision{Verdict: Append}
}
