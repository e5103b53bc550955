package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// OffsetCommit v0–v8. v0 commits are simple commits (no generation or
// member); v1 per-partition timestamps (-1: now) become the commit time;
// v2–v4 retention times are accepted and ignored (offsets are kept until
// deleted by management); v6 leader epochs are stored and returned by
// OffsetFetch; v7+ carry group.instance.id (FENCED_INSTANCE_ID for a stale
// member id of a static member); v8 is v7 flexible. Errors: the group's (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// REBALANCE_IN_PROGRESS, NOT_COORDINATOR...) for every partition; per
// partition UNKNOWN_TOPIC_OR_PARTITION and OFFSET_METADATA_TOO_LARGE; the
// write's: not leader → NOT_COORDINATOR, backpressure →
// COORDINATOR_NOT_AVAILABLE, too large → INVALID_COMMIT_OFFSET_SIZE,
// timeout → REQUEST_TIMED_OUT.
var offsetCommitAPI = api{
	key:       kmsg.OffsetCommit,
	modern:    upTo(8),
	kafka0102: upTo(2),
	handle:    handleOffsetCommit,
	shape:     offsetCommitShape,
	shapeMax:  8,
}

// offsetCommitShape walks the request layout (checkShape).
func offsetCommitShape(r *shapeReader, v int16) {
	r.str(false) // group
	if v >= 1 {
		r.i32()      // generation
		r.str(false) // member id
	}
	if v >= 7 {
		r.str(true) // group instance id
	}
	if v >= 2 && v <= 4 {
		r.i64() // retention time
	}
	r.array(false, func() {
		r.str(false)
		r.array(false, func() {
			r.i32() // partition
			r.i64() // offset
			if v == 1 {
				r.i64() // timestamp
			}
			if v >= 6 {
				r.i32() // leader epoch
			}
			r.str(true) // metadata
			r.endStruct()
		})
		r.endStruct()
	})
	r.endStruct()
}

// handleOffsetCommit writes the commits to the offsets stream and answers once Raft commits them.
func handleOffsetCommit(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	v := sl.version
	resp := kmsg.NewPtrOffsetCommitResponse()
	op := &commitOp{sl: sl, resp: resp, dl: now + int64(s.cfg.OffsetCommitTimeout)}
	gen, mid := req.Generation, req.MemberID
	if v == 0 {
		gen, mid = -1, ""
	}
	wall := s.groups.wall(now)
	s.groups.mu.Lock()
	code := s.groups.access(now) // an empty group id is valid for commits
	if code == errNone && v >= 7 {
		code = s.groups.c.Fenced(req.Group, mid, instanceOf(req.InstanceID))
	}
	if code == errNone {
		code = s.groups.c.CheckCommit(now, req.Group, gen, mid)
	}
	s.groups.mu.Unlock()
	maxMeta := s.groups.c.Config().MaxMetadataBytes
	for ti, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for pi, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			known := s.be.HasStream(t.Topic)
			switch {
			case code != errNone:
				rp.ErrorCode = code
			case !known || p.Partition != 0:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case len(meta) > maxMeta:
				rp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			default:
				ts := wall
				if v == 1 && p.Timestamp != -1 {
					ts = p.Timestamp
				}
				epoch := int32(-1)
				if v >= 6 {
					epoch = p.LeaderEpoch
				}
				op.commits = append(op.commits, group.Commit{
					Key:    group.OffsetKey{Group: req.Group, Topic: t.Topic, Partition: p.Partition},
					Offset: group.Offset{Offset: p.Offset, LeaderEpoch: epoch, Metadata: meta, CommitTime: ts},
				})
				op.at = append(op.at, [2]int{ti, pi})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(op.commits) == 0 {
		s.finish(sl, resp)
		return
	}
	s.nextToken++
	op.token = s.nextToken
	s.produces[op.token] = op
	sl.op = op
	tok, notify := op.token, s.notify
	recs := Records{Batches: group.EncodeCommits(op.commits, wall), Offsets: int64(len(op.commits))}
	s.be.Produce(s.groups.topic, recs, func(p Produced, err error) {
		notify(Completion{Token: tok, Produced: p, Err: err})
	})
}

type commitOp struct {
	sl      *slot
	resp    *kmsg.OffsetCommitResponse
	dl      int64
	token   ProduceToken
	commits []group.Commit
	at      [][2]int // response position of each commit
}

func (op *commitOp) setAll(code int16) {
	for _, a := range op.at {
		op.resp.Topics[a[0]].Partitions[a[1]].ErrorCode = code
	}
}

func (op *commitOp) complete(s *Session, done Completion, _ int64) {
	if op.sl.done {
		return
	}
	if done.Err != nil {
		code := errorCode(done.Err, 0)
		switch code {
		case kerr.NotLeaderForPartition.Code:
			code = kerr.NotCoordinator.Code
		case kerr.NotEnoughReplicas.Code, kerr.UnknownTopicOrPartition.Code, kerr.LeaderNotAvailable.Code:
			code = kerr.CoordinatorNotAvailable.Code
		case kerr.MessageTooLarge.Code:
			code = kerr.InvalidCommitOffsetSize.Code
		}
		op.setAll(code)
	} else {
		s.groups.mu.Lock()
		for i, c := range op.commits {
			o := c.Offset
			s.groups.c.ApplyOffset(c.Key, &o, done.Base+int64(i))
		}
		s.groups.mu.Unlock()
	}
	s.finish(op.sl, op.resp)
}

func (op *commitOp) poll(s *Session, now int64) {
	if op.sl.done || now < op.dl {
		return
	}
	delete(s.produces, op.token)
	op.setAll(kerr.RequestTimedOut.Code)
	s.finish(op.sl, op.resp)
}

func (op *commitOp) abandon(s *Session) { delete(s.produces, op.token) }

func (op *commitOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *commitOp) waits() []<-chan struct{} { return nil }
