package kafka

import (
	"fmt"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/records"
)

// Produce v0–v8.
//
// v3+ carry RecordBatch v2: validated (framing, CRC-32C, size, codec, no
// transactions) without parsing records and passed on as is; zstd only from
// v7 (UNSUPPORTED_COMPRESSION_TYPE before). v0–v2 carry a MessageSet v0/v1,
// converted to v2 batches. Each partition is one Backend.Produce call, made
// at once in request order (pipelining); the request is answered when every
// partition is committed, or failed, or timeout_ms passed (those partitions:
// REQUEST_TIMED_OUT). acks=1 and acks=-1 both wait for the Raft commit;
// acks=0 gets no response at all. base_offset is in every version (-1 on
// error); log_append_time is -1 (VDL keeps CreateTime); log_start_offset
// (v5+) is the stream's first offset; v8's record_errors stays empty and
// error_message names the problem. A non-null transactional_id (v3+) is
// ignored: transactional batches are refused by validation.
var produceAPI = api{
	key:       kmsg.Produce,
	modern:    upTo(8),
	kafka0102: upTo(2),
	handle:    handleProduce,
	shape:     produceShape,
	shapeMax:  9,
}

// produceShape walks the request layout (checkShape).
func produceShape(r *shapeReader, v int16) {
	if v >= 3 {
		r.str(true)
	}
	r.i16()
	r.i32()
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32()
			r.bytes(true)
			r.endStruct()
		})
		r.endStruct()
	})
	r.endStruct()
}

// handleProduce submits each partition and parks the request until every one is answered.
func handleProduce(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.ProduceRequest)
	v := sl.version
	timeout := int64(req.TimeoutMillis) * 1e6
	if req.TimeoutMillis <= 0 {
		timeout = int64(s.cfg.DefaultProduceTimeout)
	}
	op := &produceOp{sl: sl, acks: req.Acks, dl: now + timeout, resp: kmsg.NewPtrProduceResponse()}
	sl.op = op
	badAcks := req.Acks != 0 && req.Acks != 1 && req.Acks != -1
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		op.resp.Topics = append(op.resp.Topics, rt)
	}
	for ti, t := range req.Topics {
		for pi, p := range t.Partitions {
			part := &producePart{op: op, ti: ti, pi: pi, stream: t.Topic}
			if badAcks {
				part.setError(kerr.InvalidRequiredAcks.Code, fmt.Sprintf("acks must be -1, 0 or 1, not %d", req.Acks))
				continue
			}
			recs, code, msg := s.admitProduce(v, t.Topic, p.Partition, p.Records)
			if code != errNone {
				part.setError(code, msg)
				continue
			}
			recs.Chain, s.chained = s.chain, true
			s.nextToken++
			part.token = s.nextToken
			s.produces[part.token] = part
			op.pending++
			op.parts = append(op.parts, part)
			tok, notify := part.token, s.notify
			s.be.Produce(t.Topic, recs, func(p Produced, err error) {
				notify(Completion{Token: tok, Produced: p, Err: err})
			})
		}
	}
	op.maybeFinish(s)
}

// admitProduce checks one partition's records and returns the v2 batches to
// append, with the offsets they take (ValidateV2 checks that each batch's
// lastOffsetDelta is its record count - 1, so the offsets are the records).
func (s *Session) admitProduce(v int16, topic string, partition int32, recs []byte) (Records, int16, string) {
	if !s.be.HasStream(topic) || partition != 0 {
		return Records{}, kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("unknown topic or partition %s/%d", topic, partition)
	}
	if topic == s.cfg.OffsetsTopic {
		return Records{}, kerr.InvalidTopicException.Code, "the offsets stream is internal: it is written by the group coordinator only"
	}
	if v >= 3 {
		info, err := records.ValidateV2(recs, s.cfg.MaxMessageBytes)
		if err != nil {
			return Records{}, records.ErrorCode(err, v), err.Error()
		}
		if info.Codecs.Has(records.CodecZstd) && v < 7 {
			return Records{}, kerr.UnsupportedCompressionType.Code, fmt.Sprintf("zstd needs produce v7+, got v%d", v)
		}
		return s.admitSize(Records{Batches: recs, Offsets: info.Records, Room: roomBefore(s.frame, recs)})
	}
	out, info, err := records.FromMessageSet(recs, s.cfg.MaxMessageBytes, s.cfg.MaxFrameBytes)
	if err != nil {
		return Records{}, records.ErrorCode(err, v), err.Error()
	}
	return s.admitSize(Records{Batches: out, Offsets: info.Records})
}

// roomBefore returns recs with the byte before it in frame, if recs is
// frame's memory (kmsg decodes bytes fields as slices of the request) and
// not at its start; else nil.
func roomBefore(frame, recs []byte) []byte {
	if len(recs) == 0 || len(frame) == 0 {
		return nil
	}
	// recs' offset in frame if it is frame's memory (kmsg caps the slices
	// it cuts, so their capacity cannot tell): the index check proves it.
	k := int(uintptr(unsafe.Pointer(unsafe.SliceData(recs))) - uintptr(unsafe.Pointer(unsafe.SliceData(frame))))
	if k < 1 || k > len(frame)-len(recs) || &frame[k] != &recs[0] {
		return nil
	}
	return frame[k-1 : k+len(recs) : k+len(recs)]
}

// admitSize refuses a record set larger than one Raft entry may be.
func (s *Session) admitSize(recs Records) (Records, int16, string) {
	if len(recs.Batches) > s.cfg.MaxRecordSetBytes {
		return Records{}, kerr.MessageTooLarge.Code, fmt.Sprintf("the record set for one partition is %d bytes, at most %d are accepted in one produce (max_entry_bytes)",
			len(recs.Batches), s.cfg.MaxRecordSetBytes)
	}
	return recs, errNone, ""
}

type produceOp struct {
	sl      *slot
	acks    int16
	dl      int64
	resp    *kmsg.ProduceResponse
	pending int
	failed  string         // first error, for the close reason
	parts   []*producePart // submitted parts, in order
}

type producePart struct {
	op     *produceOp
	ti, pi int
	stream string
	token  ProduceToken
	// finished: the outcome is in the response (or abandoned).
	finished bool
}

func (p *producePart) rp() *kmsg.ProduceResponseTopicPartition {
	return &p.op.resp.Topics[p.ti].Partitions[p.pi]
}

func (p *producePart) setError(code int16, msg string) {
	rp := p.rp()
	rp.ErrorCode = code
	rp.BaseOffset = -1
	if p.op.sl.version >= 8 && msg != "" {
		rp.ErrorMessage = &msg
	}
	if p.op.failed == "" {
		p.op.failed = fmt.Sprintf("produce to %s failed with error %d (%s)", p.stream, code, msg)
	}
}

func (p *producePart) complete(s *Session, c Completion, _ int64) {
	if p.finished {
		return
	}
	p.finished = true
	if c.Err != nil {
		p.setError(errorCode(c.Err, p.op.sl.version), c.Err.Error())
	} else {
		rp := p.rp()
		rp.BaseOffset, rp.LogStartOffset = c.Base, c.LogStart
	}
	p.op.pending--
	p.op.maybeFinish(s)
}

func (op *produceOp) maybeFinish(s *Session) {
	if op.pending > 0 || op.sl.done {
		return
	}
	if op.acks == 0 {
		s.finishSilently(op.sl)
	} else {
		s.finish(op.sl, op.resp)
	}
	if op.failed != "" {
		s.fail(op.sl, op.failed)
	}
}

func (op *produceOp) poll(s *Session, now int64) {
	if now < op.dl || op.sl.done {
		return
	}
	for _, part := range op.parts {
		if !part.finished {
			delete(s.produces, part.token)
			part.finished = true
			part.setError(kerr.RequestTimedOut.Code, "timed out waiting for the commit")
			op.pending--
		}
	}
	op.maybeFinish(s)
}

// abandon forgets the op's outstanding produces (the connection is closing).
func (op *produceOp) abandon(s *Session) {
	for _, part := range op.parts {
		if !part.finished {
			delete(s.produces, part.token)
			part.finished = true
		}
	}
}

func (op *produceOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *produceOp) waits() []<-chan struct{} { return nil }
