package kafka

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vdl-project/vdl/kafka/group"
)

// ProducerIDBlock is how many producer ids one allocation takes.
const ProducerIDBlock = 1000

// ErrNoProducerIDs: no producer id block could be allocated now (the
// offsets stream has no leader, or the leader could not be reached).
var ErrNoProducerIDs = errors.New("kafka: no producer ids available now")

// ProducerIDs hands out the producer ids of InitProducerId, unique across
// the cluster. Ids are allocated in blocks through Raft: a block is one
// record appended to the offsets stream (group.EncodeProducerIDBlock), and
// the record's offset o names it: ids [o×ProducerIDBlock,
// (o+1)×ProducerIDBlock). Offsets are never reused, so no two blocks
// overlap, whichever server allocated them; a server keeps only the rest
// of its current block in memory, and a restarted one allocates a new
// block. Only the offsets stream's leader can append: another server asks
// it (Config.ForwardProducerIDs; the server package forwards over the
// peers' HTTP), and without a forwarder answers COORDINATOR_NOT_AVAILABLE
// so that the client tries another broker.
type ProducerIDs struct {
	be      Backend
	topic   string
	forward func(leader int32, done func(first int64, err error))

	mu       sync.Mutex
	next     int64 // next id of the current block
	end      int64 // end of the current block
	waiting  []func(int64, error)
	fetching bool
}

func newProducerIDs(be Backend, topic string, forward func(int32, func(int64, error))) *ProducerIDs {
	return &ProducerIDs{be: be, topic: topic, forward: forward}
}

// Next calls done once with a new producer id (or an error), possibly
// before it returns, possibly from another goroutine. ts (Unix ms) stamps
// a block record it appends.
func (p *ProducerIDs) Next(ts int64, done func(id int64, err error)) {
	p.mu.Lock()
	if p.next < p.end {
		id := p.next
		p.next++
		p.mu.Unlock()
		done(id, nil)
		return
	}
	p.waiting = append(p.waiting, done)
	start := !p.fetching
	p.fetching = true
	p.mu.Unlock()
	if start {
		p.fetch(ts)
	}
}

// fetch gets a new block, from the offsets stream here or through its
// leader.
func (p *ProducerIDs) fetch(ts int64) {
	info, ok := p.be.Stream(p.topic)
	switch {
	case !ok:
		p.got(ts, -1, fmt.Errorf("%w: the offsets stream %s is not configured", ErrNoProducerIDs, p.topic))
	case info.Local:
		p.AllocateBlock(ts, func(first int64, err error) { p.got(ts, first, err) })
	case info.Leader >= 0 && p.forward != nil:
		p.forward(info.Leader, func(first int64, err error) { p.got(ts, first, err) })
	default:
		p.got(ts, -1, fmt.Errorf("%w: the offsets stream has no leader here", ErrNoProducerIDs))
	}
}

// got takes an allocated block (first id) or the failure to get one.
func (p *ProducerIDs) got(ts, first int64, err error) {
	var serve []func(int64, error)
	var ids []int64
	p.mu.Lock()
	if err == nil {
		p.next, p.end = first, first+ProducerIDBlock
		for len(p.waiting) > 0 && p.next < p.end {
			serve = append(serve, p.waiting[0])
			ids = append(ids, p.next)
			p.waiting, p.next = p.waiting[1:], p.next+1
		}
	} else {
		serve, p.waiting = p.waiting, nil
	}
	again := len(p.waiting) > 0
	p.fetching = again
	p.mu.Unlock()
	for i, done := range serve {
		if err != nil {
			done(-1, err)
		} else {
			done(ids[i], nil)
		}
	}
	if again {
		p.fetch(ts)
	}
}

// AllocateBlock appends a block record to the offsets stream (this server
// must lead it) and calls done with the block's first id once committed.
func (p *ProducerIDs) AllocateBlock(ts int64, done func(first int64, err error)) {
	recs := Records{Batches: group.EncodeProducerIDBlock(ProducerIDBlock, ts), Offsets: 1}
	p.be.Produce(p.topic, recs, func(r Produced, err error) {
		if err != nil {
			done(-1, fmt.Errorf("%w: %w", ErrNoProducerIDs, err))
			return
		}
		done(r.Base*ProducerIDBlock, nil)
	})
}
