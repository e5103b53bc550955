package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets v0–v5, answered by the stream's leader only (others:
// NOT_LEADER_FOR_PARTITION). Timestamp -2 → log start offset, -1 → high
// watermark (never the uncommitted end), any other value → the first offset
// whose record timestamp is ≥ it (offset -1 when none). v1+ return the
// record's timestamp for a lookup and -1 for -1/-2. v0 returns an offsets
// array of at most max_num_offsets (here at most one): for a lookup with no
// match it holds the high watermark (where such a consumer would start).
// isolation_level (v2+) changes nothing (no transactions: LSO = HWM);
// current_leader_epoch (v4+) is checked as Fetch checks it
// (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); leader_epoch (v4+) is the
// epoch of the record at the offset answered (the current epoch for -1, as
// Kafka answers its latest epoch), -1 when no record.
//
// Like a fetch, the answer waits for a read fence per stream (LogView.Fence),
// so a leader that was cut off never answers with a stale high watermark or
// log start: "latest" is linearizable.
var listOffsetsAPI = api{
	key:       kmsg.ListOffsets,
	modern:    upTo(5),
	kafka0102: upTo(1),
	handle:    handleListOffsets,
	shape:     listOffsetsShape,
	shapeMax:  6,
}

// listOffsetsShape walks the request layout (checkShape).
func listOffsetsShape(r *shapeReader, v int16) {
	r.i32()
	if v >= 2 {
		r.i8()
	}
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32()
			if v >= 4 {
				r.i32()
			}
			r.i64()
			if v == 0 {
				r.i32()
			}
			r.endStruct()
		})
		r.endStruct()
	})
	r.endStruct()
}

// handleListOffsets starts the read fences and answers once they pass.
func handleListOffsets(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	topics := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = t.Topic
	}
	op := &listOffsetsOp{sl: sl, req: req, fences: s.startFences(topics), dl: now + fenceGrace}
	op.poll(s, now)
}

// listOffsetsOp is a ListOffsets waiting for its read fences.
type listOffsetsOp struct {
	sl     *slot
	req    *kmsg.ListOffsetsRequest
	fences readFences
	dl     int64
}

func (op *listOffsetsOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	if len(op.fences.pending()) > 0 && now < op.dl {
		op.sl.op = op
		return
	}
	op.answer(s)
}

func (op *listOffsetsOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *listOffsetsOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return op.fences.pending()
}

func (op *listOffsetsOp) answer(s *Session) {
	req, v := op.req, op.sl.version
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			current := int32(-1)
			if v >= 4 {
				current = p.CurrentLeaderEpoch
			}
			off, ts, epoch, code := s.listOffset(t.Topic, p.Partition, p.Timestamp, current, v == 0, op.fences.get(t.Topic))
			rp.ErrorCode = code
			if code == errNone {
				rp.Offset, rp.Timestamp, rp.LeaderEpoch = off, ts, epoch
				if v == 0 {
					rp.OldStyleOffsets = []int64{}
					if p.MaxNumOffsets > 0 {
						rp.OldStyleOffsets = append(rp.OldStyleOffsets, off)
					}
				}
			} else if v == 0 {
				rp.OldStyleOffsets = []int64{}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	s.finish(op.sl, resp)
}

// listOffset resolves one partition's query (v0's fallback to the high
// watermark included: v1+ callers get -1 from it instead), with the leader
// epoch of the offset answered.
func (s *Session) listOffset(topic string, partition int32, ts int64, current int32, v0 bool, fence ReadFence) (offset, timestamp int64, epoch int32, code int16) {
	if !s.be.HasStream(topic) || partition != 0 {
		return -1, -1, -1, kerr.UnknownTopicOrPartition.Code
	}
	view, err := s.be.Log(topic)
	if err != nil {
		return -1, -1, -1, errorCode(err, 0)
	}
	if code := fenceCode(fence); code != errNone {
		return -1, -1, -1, code
	}
	if code := epochCode(view, current); code != errNone {
		return -1, -1, -1, code
	}
	switch ts {
	case -2:
		start := view.StartOffset()
		return start, -1, view.EpochAt(start), errNone
	case -1:
		return view.HighWatermark(), -1, view.LeaderEpoch(), errNone
	}
	off, at, err := view.OffsetForTime(ts)
	if err != nil {
		return -1, -1, -1, errorCode(err, 0)
	}
	if off < 0 {
		if v0 {
			return view.HighWatermark(), -1, -1, errNone
		}
		return off, at, -1, errNone
	}
	return off, at, view.EpochAt(off), errNone
}
