package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId v0–v4 (modern profile only: Kafka 0.10.2 had no
// idempotence). Idempotent producers only: a new producer id, epoch 0,
// unique across the cluster (ProducerIDs: blocks allocated through the
// offsets stream). v2+ are flexible. v3+'s producer_id / producer_epoch
// (a KIP-360 epoch bump) are answered as Kafka answers a producer without
// a transactional id: with a new id at epoch 0. A non-null
// transactional_id → UNSUPPORTED_VERSION (35): VDL has no transactions
// (AddPartitionsToTxn, EndTxn... are not advertised, FindCoordinator
// refuses the transaction coordinator type). No block available (the
// offsets stream has no leader, its leader unreachable, the allocation
// failed or took longer than OffsetCommitTimeout) →
// COORDINATOR_NOT_AVAILABLE (15), which every client retries.
var initProducerIDAPI = api{
	key:      kmsg.InitProducerID,
	modern:   upTo(4),
	handle:   handleInitProducerID,
	shape:    initProducerIDShape,
	shapeMax: 4,
}

// initProducerIDShape walks the request layout (checkShape).
func initProducerIDShape(r *shapeReader, v int16) {
	r.str(true)
	r.i32()
	if v >= 3 {
		r.i64()
		r.i16()
	}
	r.endStruct()
}

// handleInitProducerID takes an id from the server's allocator.
func handleInitProducerID(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		s.finish(sl, resp)
		return
	}
	op := &initProducerIDOp{sl: sl, resp: resp, dl: now + int64(s.cfg.OffsetCommitTimeout)}
	s.nextToken++
	op.token = s.nextToken
	s.produces[op.token] = op
	sl.op = op
	tok, notify := op.token, s.notify
	s.groups.pids.Next(s.groups.wall(now), func(id int64, err error) {
		notify(Completion{Token: tok, Produced: Produced{Base: id}, Err: err})
	})
}

type initProducerIDOp struct {
	sl    *slot
	resp  *kmsg.InitProducerIDResponse
	dl    int64
	token ProduceToken
}

func (op *initProducerIDOp) complete(s *Session, c Completion, _ int64) {
	if op.sl.done {
		return
	}
	if c.Err != nil {
		op.resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	} else {
		op.resp.ProducerID, op.resp.ProducerEpoch = c.Base, 0
	}
	s.finish(op.sl, op.resp)
}

func (op *initProducerIDOp) poll(s *Session, now int64) {
	if op.sl.done || now < op.dl {
		return
	}
	delete(s.produces, op.token)
	op.resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	s.finish(op.sl, op.resp)
}

func (op *initProducerIDOp) abandon(s *Session) { delete(s.produces, op.token) }

func (op *initProducerIDOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *initProducerIDOp) waits() []<-chan struct{} { return nil }
