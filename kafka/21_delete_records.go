package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords v0–v1 (modern profile only): moves a stream's log start to
// offset through the stream's Raft group — the replicated retention
// command (Backend.Retain) that retention policies and
// `POST /streams/{name}/retain` use, so every replica records the same
// start and deletes its whole segments below it. The answer comes after
// the command committed; from then Fetch below the new start gets
// OFFSET_OUT_OF_RANGE and ListOffsets earliest answers it, on the leader
// at once (before the segments are deleted).
//
// offset -1 means the high watermark (delete everything committed); an
// offset above the high watermark, or another negative one, gets
// OFFSET_OUT_OF_RANGE; one at or below the current start changes nothing
// and answers the current start (as Kafka). low_watermark is the start
// after the request. The internal offsets stream is refused
// (INVALID_TOPIC_EXCEPTION: its compaction owns its start). No commit within
// timeout_ms (≤ 0: Config.DefaultProduceTimeout) → REQUEST_TIMED_OUT (the
// command may still apply).
var deleteRecordsAPI = api{
	key:      kmsg.DeleteRecords,
	modern:   upTo(1),
	handle:   handleDeleteRecords,
	shape:    deleteRecordsShape,
	shapeMax: 1,
}

// deleteRecordsShape walks the request layout (checkShape).
func deleteRecordsShape(r *shapeReader, v int16) {
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32()
			r.i64()
			r.endStruct()
		})
		r.endStruct()
	})
	r.i32()
	r.endStruct()
}

func handleDeleteRecords(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := kmsg.NewPtrDeleteRecordsResponse()
	timeout := int64(req.TimeoutMillis) * 1e6
	if timeout <= 0 {
		timeout = int64(s.cfg.DefaultProduceTimeout)
	}
	op := &deleteOp{sl: sl, resp: resp, dl: now + timeout}
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]bool{}
	for ti, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for pi, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			if k := (tp{t.Topic, p.Partition}); seen[k] {
				rp.ErrorCode = kerr.InvalidRequest.Code // once per partition
			} else {
				seen[k] = true
				var before int64
				before, rp.LowWatermark, rp.ErrorCode = s.deletePoint(t.Topic, p.Partition, p.Offset)
				if before >= 0 {
					op.start(s, t.Topic, before, [2]int{ti, pi})
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if op.pending == 0 {
		s.finish(sl, resp)
		return
	}
	sl.op = op
}

// deletePoint checks one partition: the offset to retain below (-1: no
// command needed), or the answer now.
func (s *Session) deletePoint(topic string, partition int32, offset int64) (before, low int64, code int16) {
	if !s.be.HasStream(topic) || partition != 0 {
		return -1, -1, kerr.UnknownTopicOrPartition.Code
	}
	if topic == s.cfg.OffsetsTopic {
		return -1, -1, kerr.InvalidTopicException.Code
	}
	view, err := s.be.Log(topic)
	if err != nil {
		return -1, -1, errorCode(err, 0)
	}
	hwm, start := view.HighWatermark(), view.StartOffset()
	if offset == -1 {
		offset = hwm
	}
	switch {
	case offset < 0 || offset > hwm:
		return -1, -1, kerr.OffsetOutOfRange.Code
	case offset <= start:
		return -1, start, errNone
	}
	return offset, -1, errNone
}

// deleteOp is a DeleteRecords waiting for its retention commands.
type deleteOp struct {
	sl      *slot
	resp    *kmsg.DeleteRecordsResponse
	dl      int64
	pending int
	parts   map[ProduceToken]deletePart
}

type deletePart struct {
	op     *deleteOp
	before int64
	at     [2]int
}

func (op *deleteOp) start(s *Session, topic string, before int64, at [2]int) {
	s.nextToken++
	tok, notify := s.nextToken, s.notify
	if op.parts == nil {
		op.parts = map[ProduceToken]deletePart{}
	}
	part := deletePart{op: op, before: before, at: at}
	op.parts[tok] = part
	op.pending++
	s.produces[tok] = part
	s.be.Retain(topic, before, func(err error) { notify(Completion{Token: tok, Err: err}) })
}

func (p deletePart) complete(s *Session, c Completion, _ int64) {
	op := p.op
	if op.sl.done {
		return
	}
	rp := &op.resp.Topics[p.at[0]].Partitions[p.at[1]]
	if rp.ErrorCode = errorCode(c.Err, 0); rp.ErrorCode == errNone {
		rp.LowWatermark = p.before
	}
	delete(op.parts, c.Token)
	if op.pending--; op.pending == 0 {
		s.finish(op.sl, op.resp)
	}
}

func (op *deleteOp) poll(s *Session, now int64) {
	if op.sl.done || now < op.dl {
		return
	}
	op.abandon(s)
	s.finish(op.sl, op.resp)
}

// abandon forgets the outstanding commands; their partitions answer
// REQUEST_TIMED_OUT if the response still goes out.
func (op *deleteOp) abandon(s *Session) {
	for tok, p := range op.parts {
		delete(s.produces, tok)
		op.resp.Topics[p.at[0]].Partitions[p.at[1]].ErrorCode = kerr.RequestTimedOut.Code
	}
	clear(op.parts)
}

func (op *deleteOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *deleteOp) waits() []<-chan struct{} { return nil }
