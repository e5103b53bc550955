package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/records"
	"github.com/vdl-project/vdl/storage"
)

// Fetch v0–v11.
//
// Each partition returns whole stored batches starting with the batch that
// contains fetch_offset (clients skip the records before it), up to
// partition_max_bytes and, from v3, the response's max_bytes; the first
// non-empty partition always gets at least one whole batch even if it is
// larger (VDL also does so for v0–v2, where Kafka would send a cut message
// the client cannot use). Responses end on a batch boundary. Visible range
// is [log start, high watermark): fetching at the high watermark returns
// nothing and no error; below the start or above the high watermark →
// OFFSET_OUT_OF_RANGE (with the real high watermark and log start filled in).
//
// Long poll: when fewer than min_bytes are available and no partition has an
// error, the request parks until a high watermark moves (LogView.Changed) or
// max_wait_ms passes; at max_wait it is always answered, even empty.
//
// Formats: v4+ return stored v2 bytes as they are, except that v4–v9 cannot
// carry zstd: the partition is cut before the first zstd batch, and if that
// batch is the first one it gets UNSUPPORTED_COMPRESSION_TYPE (as Kafka).
// v0–v3 get a down-converted MessageSet (magic 0 for v0–v1, magic 1 for
// v2–v3; zstd data is sent uncompressed).
//
// Version fields: last_stable_offset (v4+) = high watermark (no
// transactions); aborted_transactions (v4+) empty for READ_COMMITTED, null
// otherwise; log_start_offset (v5+); fetch sessions (v7+) are not created:
// session id 0 and epoch 0 or -1 make a full fetch answered with session id
// 0 (clients then keep sending full fetches); any other session id →
// FETCH_SESSION_ID_NOT_FOUND, any other epoch → INVALID_FETCH_SESSION_EPOCH;
// current_leader_epoch (v9+) is accepted as sent (VDL reports epoch -1);
// preferred_read_replica (v11) is -1; rack_id is ignored. replica_id is
// ignored: every fetcher is a consumer.
func handleFetch(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.FetchRequest)
	if sl.version >= 7 {
		var code int16
		switch {
		case req.SessionID != 0:
			code = errFetchSessionIDNotFound
		case req.SessionEpoch != 0 && req.SessionEpoch != -1:
			code = errInvalidFetchSessionEpoch
		}
		if code != errNone {
			resp := kmsg.NewPtrFetchResponse()
			resp.ErrorCode = code
			s.finish(sl, resp)
			return
		}
	}
	op := &fetchOp{sl: sl, req: req, dl: now + int64(max(req.MaxWaitMillis, 0))*1e6}
	// Linearizable reads (fences.go). The fence may take a quorum round
	// trip past max_wait; it is bounded by fenceGrace.
	topics := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = t.Topic
	}
	op.fences = s.startFences(topics)
	op.fenceDL = max(op.dl, now+fenceGrace)
	op.evaluate(s, now, false)
}

type fetchOp struct {
	sl      *slot
	req     *kmsg.FetchRequest
	dl      int64
	chans   []<-chan struct{}
	fences  readFences
	fenceDL int64
}

// evaluate reads every partition; it answers when final, when any partition
// has an error, or when min_bytes are there; otherwise it parks. Nothing is
// read before the read fences pass (or fail, or time out).
func (op *fetchOp) evaluate(s *Session, now int64, final bool) {
	if pending := op.fences.pending(); len(pending) > 0 && now < op.fenceDL {
		op.chans = pending
		op.sl.op = op
		return
	}
	resp, n, errs, chans := s.readFetch(op.req, op.sl.version, op.fences)
	if final || errs || int64(n) >= int64(op.req.MinBytes) || now >= op.dl {
		s.finish(op.sl, resp)
		return
	}
	op.chans = chans
	op.sl.op = op
}

func (op *fetchOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	if now >= op.dl && (now >= op.fenceDL || len(op.fences.pending()) == 0) {
		op.evaluate(s, now, true)
		return
	}
	for _, ch := range op.chans {
		select {
		case <-ch:
			op.evaluate(s, now, false)
			return
		default:
		}
	}
}

func (op *fetchOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	if len(op.fences.pending()) > 0 {
		return op.fenceDL
	}
	return op.dl
}

func (op *fetchOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return op.chans
}

// readFetch builds the response from the current state: it returns the
// response, the record bytes in it, whether any partition has an error, and
// the change channels of the partitions read.
func (s *Session) readFetch(req *kmsg.FetchRequest, v int16, fences readFences) (*kmsg.FetchResponse, int, bool, []<-chan struct{}) {
	resp := kmsg.NewPtrFetchResponse()
	// The server's cap holds in every version (v0-2 have no MaxBytes).
	budget := s.cfg.FetchMaxBytes
	if v >= 3 {
		budget = min(budget, int(max(req.MaxBytes, 0)))
	}
	total := 0
	errs := false
	var chans []<-chan struct{}
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]bool{}
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			rp.PreferredReadReplica = -1
			if v >= 4 && req.IsolationLevel == 1 {
				rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
			}
			if k := (tp{t.Topic, p.Partition}); seen[k] {
				// Answered once: the same partition again would only
				// multiply the response.
				rp.ErrorCode, rp.RecordBatches, errs = errInvalidRequest, []byte{}, true
				rt.Partitions = append(rt.Partitions, rp)
				continue
			} else {
				seen[k] = true
			}
			// v0-2 promise a batch per partition even past the budget
			// (at most one of each stream's); v3+ the first one only.
			atLeastOne := total == 0 || (v < 3 && budget > 0)
			data, code, ch := s.readPartition(&rp, t.Topic, p, v, budget, atLeastOne, fences.get(t.Topic))
			if ch != nil {
				chans = append(chans, ch)
			}
			if code != errNone {
				rp.ErrorCode = code
				errs = true
			}
			if data == nil {
				data = []byte{} // an empty set, not null: librdkafka rejects size -1
			}
			rp.RecordBatches = data
			total += len(data)
			budget -= len(data)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, total, errs, chans
}

func (s *Session) readPartition(rp *kmsg.FetchResponseTopicPartition, topic string, p kmsg.FetchRequestTopicPartition, v int16, budget int, atLeastOne bool, fence ReadFence) ([]byte, int16, <-chan struct{}) {
	if !s.be.HasStream(topic) || p.Partition != 0 {
		return nil, errUnknownTopicOrPartition, nil
	}
	view, err := s.be.Log(topic)
	if err != nil {
		return nil, errorCode(err, 0), nil
	}
	if code := fenceCode(fence); code != errNone {
		return nil, code, nil
	}
	ch := view.Changed() // before reading what we wait on
	hwm, start := view.HighWatermark(), view.StartOffset()
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hwm, hwm, start
	off := p.FetchOffset
	if off < start || off > hwm {
		return nil, errOffsetOutOfRange, ch
	}
	limit := min(int(max(p.PartitionMaxBytes, 0)), budget)
	if off == hwm || (limit <= 0 && !atLeastOne) {
		return nil, errNone, ch
	}
	batches, err := view.Read(off, hwm, max(limit, 1))
	if err != nil {
		if errors.Is(err, storage.ErrOutOfRange) {
			return nil, errOffsetOutOfRange, ch
		}
		return nil, errorCode(err, 0), ch
	}
	data := cutBatches(batches, off, limit, atLeastOne)
	switch {
	case v < 4:
		magic := int8(1)
		if v < 2 {
			magic = 0
		}
		ms, err := records.ToMessageSet(data, magic)
		if err != nil {
			return nil, errUnknownServerError, ch
		}
		data = ms
	case v < 10:
		pos := 0
		for h, b := range records.Batches(data) {
			if h.Codec() == records.CodecZstd {
				if pos == 0 {
					return nil, errUnsupportedCompression, ch
				}
				break
			}
			pos += len(b)
		}
		data = data[:pos]
	}
	return data, errNone, ch
}

// cutBatches joins what Read returned, drops whole batches before the one
// containing offset, and keeps whole batches up to limit bytes (at least one
// when atLeastOne).
func cutBatches(batches []storage.Batch, offset int64, limit int, atLeastOne bool) []byte {
	var data []byte
	switch len(batches) {
	case 0:
		return nil
	case 1:
		data = batches[0].Data
	default:
		n := 0
		for _, b := range batches {
			n += len(b.Data)
		}
		data = make([]byte, 0, n)
		for _, b := range batches {
			data = append(data, b.Data...)
		}
	}
	pos, ok := records.FindOffset(data, offset)
	if !ok {
		return nil
	}
	data = data[pos:]
	n := 0
	for _, b := range records.Batches(data) {
		if n+len(b) > limit && !(n == 0 && atLeastOne) {
			break
		}
		n += len(b)
	}
	return data[:n:n]
}
