package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// OffsetFetch v0–v6. A partition without a committed offset gets offset
// -1, empty metadata and no error; v2+ null topics means every committed
// offset of the group; v2+ carry a top-level error (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS...), v0–v1 carry it in every partition;
// v5+ leader epochs are the committed ones (-1 when none).
var offsetFetchAPI = api{
	key:       kmsg.OffsetFetch,
	modern:    upTo(6),
	kafka0102: upTo(1),
	handle:    handleOffsetFetch,
	shape:     offsetFetchShape,
	shapeMax:  6,
}

// offsetFetchShape walks the request layout (checkShape).
func offsetFetchShape(r *shapeReader, v int16) {
	r.str(false)
	r.array(v >= 2, func() {
		r.str(false)
		r.array(false, r.i32)
		r.endStruct()
	})
	r.endStruct()
}

// handleOffsetFetch answers once the offsets stream's read fence passes.
func handleOffsetFetch(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	op := &offsetFetchOp{sl: sl, req: kreq.(*kmsg.OffsetFetchRequest), fences: s.startFences([]string{s.groups.topic}), dl: now + fenceGrace}
	op.poll(s, now)
}

// offsetFetchOp is an OffsetFetch waiting for the offsets stream's read
// fence: committed offsets are read linearizably, so a coordinator that was
// deposed and does not know it yet never answers with stale ones.
type offsetFetchOp struct {
	sl     *slot
	req    *kmsg.OffsetFetchRequest
	fences readFences
	dl     int64
}

func (op *offsetFetchOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	if len(op.fences.pending()) > 0 && now < op.dl {
		op.sl.op = op
		return
	}
	op.answer(s, now)
}

func (op *offsetFetchOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *offsetFetchOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return op.fences.pending()
}

func (op *offsetFetchOp) answer(s *Session, now int64) {
	req, v := op.req, op.sl.version
	resp := kmsg.NewPtrOffsetFetchResponse()
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	code := s.groups.access(now)
	if code == errNone && fenceCode(op.fences.get(s.groups.topic)) != errNone {
		code = kerr.NotCoordinator.Code // leadership not confirmed since the request arrived
	}
	if v >= 2 {
		resp.ErrorCode = code
	}
	part := func(topic string, p int32) kmsg.OffsetFetchResponseTopicPartition {
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
		empty := ""
		rp.Metadata = &empty
		if code != errNone {
			if v < 2 {
				rp.ErrorCode = code
			}
			return rp
		}
		if o, ok := s.groups.c.Offset(group.OffsetKey{Group: req.Group, Topic: topic, Partition: p}); ok {
			meta := o.Metadata
			rp.Offset, rp.LeaderEpoch, rp.Metadata = o.Offset, o.LeaderEpoch, &meta
		}
		return rp
	}
	if req.Topics == nil && v >= 2 {
		if code == errNone {
			for _, e := range s.groups.c.Offsets(req.Group) {
				if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != e.Topic {
					rt := kmsg.NewOffsetFetchResponseTopic()
					rt.Topic = e.Topic
					resp.Topics = append(resp.Topics, rt)
				}
				rt := &resp.Topics[len(resp.Topics)-1]
				rt.Partitions = append(rt.Partitions, part(e.Topic, e.Partition))
			}
		}
		s.finish(op.sl, resp)
		return
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, part(t.Topic, p))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	s.finish(op.sl, resp)
}
