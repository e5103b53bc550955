package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch v0–v3 (KIP-101, KIP-320), modern profile only:
// consumers (franz-go, librdkafka, the Java client) ask it after a leader
// change, with the epoch of the last record they consumed, to learn
// whether the log they read was truncated. The answer is the largest
// epoch ≤ leader_epoch that the stream's log holds records of and the
// offset where the next epoch starts, capped at the high watermark (the
// stream's current epoch ends there); an epoch older than anything stored
// answers itself with the first offset stored after it; an epoch newer
// than the leader's answers -1/-1; a negative one -1/-1 (as Kafka). The
// history is the log's own: a stream's leader epoch is its Raft term, and
// every stored entry records its term (storage.Log.EpochEnd).
//
// current_leader_epoch (v2+) is checked as Fetch checks it
// (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); replica_id (v3+) is
// ignored (every asker is a consumer). leader_epoch in the response from
// v1. Answered by the stream's leader after a read fence, like ListOffsets,
// so a deposed leader never answers an end offset from a stale high
// watermark (a consumer would take it for a truncation).
var offsetForLeaderEpochAPI = api{
	key:      kmsg.OffsetForLeaderEpoch,
	modern:   upTo(3),
	handle:   handleOffsetForLeaderEpoch,
	shape:    offsetForLeaderEpochShape,
	shapeMax: 3,
}

// offsetForLeaderEpochShape walks the request layout (checkShape).
func offsetForLeaderEpochShape(r *shapeReader, v int16) {
	if v >= 3 {
		r.i32()
	}
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32()
			if v >= 2 {
				r.i32()
			}
			r.i32()
			r.endStruct()
		})
		r.endStruct()
	})
	r.endStruct()
}

func handleOffsetForLeaderEpoch(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	topics := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = t.Topic
	}
	op := &epochOp{sl: sl, req: req, fences: s.startFences(topics), dl: now + fenceGrace}
	op.poll(s, now)
}

// epochOp is an OffsetForLeaderEpoch waiting for its read fences.
type epochOp struct {
	sl     *slot
	req    *kmsg.OffsetForLeaderEpochRequest
	fences readFences
	dl     int64
}

func (op *epochOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	if len(op.fences.pending()) > 0 && now < op.dl {
		op.sl.op = op
		return
	}
	op.answer(s)
}

func (op *epochOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *epochOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return op.fences.pending()
}

func (op *epochOp) answer(s *Session) {
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	for _, t := range op.req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition = p.Partition
			current := int32(-1)
			if op.sl.version >= 2 {
				current = p.CurrentLeaderEpoch
			}
			rp.LeaderEpoch, rp.EndOffset, rp.ErrorCode = s.epochEnd(t.Topic, p.Partition, current, p.LeaderEpoch, op.fences.get(t.Topic))
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	s.finish(op.sl, resp)
}

// epochEnd resolves one partition.
func (s *Session) epochEnd(topic string, partition, current, epoch int32, fence ReadFence) (int32, int64, int16) {
	if !s.be.HasStream(topic) || partition != 0 {
		return -1, -1, kerr.UnknownTopicOrPartition.Code
	}
	view, err := s.be.Log(topic)
	if err != nil {
		return -1, -1, errorCode(err, 0)
	}
	if code := fenceCode(fence); code != errNone {
		return -1, -1, code
	}
	if code := epochCode(view, current); code != errNone {
		return -1, -1, code
	}
	if epoch < 0 || epoch > view.LeaderEpoch() {
		return -1, -1, errNone
	}
	le, end, err := view.EpochEnd(epoch)
	if err != nil {
		return -1, -1, errorCode(err, 0)
	}
	return le, end, errNone
}
