package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/kafka/records"
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
// current_leader_epoch (v9+) is checked against the stream's leader epoch
// (its Raft term; -1 skips the check): older → FENCED_LEADER_EPOCH, newer →
// UNKNOWN_LEADER_EPOCH, as Kafka answers (the client refreshes metadata);
// stored batches carry the epoch they were written in (partitionLeaderEpoch);
// preferred_read_replica (v11) is -1; rack_id is ignored. replica_id is
// ignored: every fetcher is a consumer.
var fetchAPI = api{
	key:       kmsg.Fetch,
	modern:    upTo(11),
	kafka0102: upTo(3),
	handle:    handleFetch,
	shape:     fetchShape,
	shapeMax:  12,
}

// fetchShape walks the request layout (checkShape).
func fetchShape(r *shapeReader, v int16) {
	r.i32() // replica id
	r.i32() // max wait
	r.i32() // min bytes
	if v >= 3 {
		r.i32()
	}
	if v >= 4 {
		r.i8()
	}
	if v >= 7 {
		r.i32()
		r.i32()
	}
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32()
			if v >= 9 {
				r.i32()
			}
			r.i64()
			if v >= 12 {
				r.i32()
			}
			if v >= 5 {
				r.i64()
			}
			r.i32()
			r.endStruct()
		})
		r.endStruct()
	})
	if v >= 7 {
		r.array(false, func() {
			r.str(false)
			r.array(false, r.i32)
			r.endStruct()
		})
	}
	if v >= 11 {
		r.str(false)
	}
	r.endStruct()
}

// handleFetch answers a fetch, or parks it until data arrives or max_wait passes.
func handleFetch(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.FetchRequest)
	if sl.version >= 7 {
		var code int16
		switch {
		case req.SessionID != 0:
			code = kerr.FetchSessionIDNotFound.Code
		case req.SessionEpoch != 0 && req.SessionEpoch != -1:
			code = kerr.InvalidFetchSessionEpoch.Code
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
	r := s.readFetch(op.req, op.sl.version, op.fences)
	if final || r.errs || int64(r.n) >= int64(op.req.MinBytes) || now >= op.dl {
		s.finishFetch(op.sl, r)
		return
	}
	releaseAll(r.rels) // parked: read again when woken
	op.chans = r.chans
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

// fetchResult is a fetch response read from the current state.
type fetchResult struct {
	resp  *kmsg.FetchResponse
	n     int  // record bytes in it
	errs  bool // a partition has an error
	chans []<-chan struct{}
	// recs: each partition's records (in order) as pieces of stored
	// memory, when the version is spliceable (resp's records are then
	// empty); rels: the pooled memory they alias.
	recs [][][]byte
	rels []Releaser
}

// finishFetch answers a fetch: spliced (the stored bytes not copied) when
// the version allows, else with the records copied into the response.
func (s *Session) finishFetch(sl *slot, r fetchResult) {
	r.resp.SetVersion(sl.version)
	if r.recs != nil {
		if pieces, ok := spliceFetch(sl.key, sl.corr, r.resp, r.recs); ok {
			sl.vec, sl.rels = pieces, r.rels
			sl.done = true
			sl.op = nil
			sl.timing.Completed = s.now
			return
		}
		k := 0
		for i := range r.resp.Topics {
			for j := range r.resp.Topics[i].Partitions {
				r.resp.Topics[i].Partitions[j].RecordBatches = joinPieces([]byte{}, r.recs[k])
				k++
			}
		}
	}
	s.finish(sl, r.resp)
	releaseAll(r.rels)
}

// readFetch builds the response from the current state.
func (s *Session) readFetch(req *kmsg.FetchRequest, v int16, fences readFences) fetchResult {
	var r fetchResult
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(v)
	splice := spliceable(v)
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
				rp.ErrorCode, rp.RecordBatches, errs = kerr.InvalidRequest.Code, []byte{}, true
				rt.Partitions = append(rt.Partitions, rp)
				if splice {
					r.recs = append(r.recs, nil)
				}
				continue
			} else {
				seen[k] = true
			}
			// v0-2 promise a batch per partition even past the budget
			// (at most one of each stream's); v3+ the first one only.
			atLeastOne := total == 0 || (v < 3 && budget > 0)
			segs, n, code, ch := s.readPartition(&rp, t.Topic, p, v, budget, atLeastOne, fences.get(t.Topic), &r.rels)
			if ch != nil {
				chans = append(chans, ch)
			}
			if code != errNone {
				rp.ErrorCode = code
				errs = true
			}
			rp.RecordBatches = []byte{} // an empty set, not null: librdkafka rejects size -1
			if splice {
				r.recs = append(r.recs, segs)
			} else if n > 0 {
				rp.RecordBatches = joinPieces(make([]byte, 0, n), segs)
			}
			total += n
			budget -= n
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.resp, r.n, r.errs, r.chans = resp, total, errs, chans
	if !splice {
		releaseAll(r.rels) // copied into the response
		r.rels = nil
	}
	return r
}

// readPartition reads one partition: its records as pieces of stored
// memory (pooled memory's releasers appended to rels), their size, an
// error code and the partition's change channel.
func (s *Session) readPartition(rp *kmsg.FetchResponseTopicPartition, topic string, p kmsg.FetchRequestTopicPartition, v int16, budget int, atLeastOne bool, fence ReadFence, rels *[]Releaser) ([][]byte, int, int16, <-chan struct{}) {
	if !s.be.HasStream(topic) || p.Partition != 0 {
		return nil, 0, kerr.UnknownTopicOrPartition.Code, nil
	}
	view, err := s.be.Log(topic)
	if err != nil {
		return nil, 0, errorCode(err, 0), nil
	}
	if code := fenceCode(fence); code != errNone {
		return nil, 0, code, nil
	}
	if v >= 9 {
		if code := epochCode(view, p.CurrentLeaderEpoch); code != errNone {
			return nil, 0, code, nil
		}
	}
	ch := view.Changed() // before reading what we wait on
	hwm, start := view.HighWatermark(), view.StartOffset()
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hwm, hwm, start
	off := p.FetchOffset
	if off < start || off > hwm {
		return nil, 0, kerr.OffsetOutOfRange.Code, ch
	}
	limit := min(int(max(p.PartitionMaxBytes, 0)), budget)
	if off == hwm || (limit <= 0 && !atLeastOne) {
		return nil, 0, errNone, ch
	}
	var batches []batchfmt.Batch
	if pr, ok := view.(PooledReader); ok {
		var rel Releaser
		batches, rel, err = pr.ReadPooled(off, hwm, max(limit, 1))
		if rel != nil {
			*rels = append(*rels, rel)
		}
	} else {
		batches, err = view.Read(off, hwm, max(limit, 1))
	}
	if err != nil {
		if errors.Is(err, ErrOutOfRange) {
			return nil, 0, kerr.OffsetOutOfRange.Code, ch
		}
		return nil, 0, errorCode(err, 0), ch
	}
	// v4–v9 cannot carry zstd: cut before the first zstd batch.
	segs, n, zstdFirst := cutBatches(batches, off, limit, atLeastOne, v >= 4 && v < 10)
	if zstdFirst {
		return nil, 0, kerr.UnsupportedCompressionType.Code, ch
	}
	if v < 4 && n > 0 {
		magic := int8(1)
		if v < 2 {
			magic = 0
		}
		ms, err := records.ToMessageSet(joinPieces(make([]byte, 0, n), segs), magic)
		if err != nil {
			return nil, 0, kerr.UnknownServerError.Code, ch
		}
		return [][]byte{ms}, len(ms), errNone, ch
	}
	return segs, n, errNone, ch
}

// cutBatches picks, from what Read returned, the whole batches from the one
// containing offset on, up to limit bytes (at least one when atLeastOne),
// as pieces of the stored memory (adjacent batches of one stored run stay
// one piece); noZstd stops before the first zstd batch, and zstdFirst says
// that batch would have been the first.
func cutBatches(batches []batchfmt.Batch, offset int64, limit int, atLeastOne, noZstd bool) (segs [][]byte, n int, zstdFirst bool) {
	started := false
	for _, sb := range batches {
		data := sb.Data
		from, pos := -1, 0
		stop := false
		for h, b := range records.Batches(data) {
			if !started {
				if h.LastOffset() < offset {
					pos += len(b)
					continue
				}
				started = true
			}
			if n+len(b) > limit && !(n == 0 && atLeastOne) {
				stop = true
				break
			}
			if noZstd && h.Codec() == records.CodecZstd {
				zstdFirst, stop = n == 0, true
				break
			}
			if from < 0 {
				from = pos
			}
			n += len(b)
			pos += len(b)
		}
		if from >= 0 {
			segs = append(segs, data[from:pos:pos])
		}
		if stop || zstdFirst || pos != len(data) {
			// Bytes that are not a whole batch end the walk, as they
			// would have ended it over the joined batches.
			break
		}
	}
	if zstdFirst {
		return nil, 0, true
	}
	return segs, n, false
}
