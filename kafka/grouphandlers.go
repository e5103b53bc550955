package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// Group and offset APIs. The semantics are group.Coordinator's (Kafka 2.4,
// dynamic membership); here requests are translated, JoinGroup and
// SyncGroup park until their result is there, and OffsetCommit waits for
// the Raft commit of its record batch in the offsets stream.

// groupAuthorizedOps: READ, DELETE, DESCRIBE (no authorizer: all allowed).
const groupAuthorizedOps = 1<<3 | 1<<6 | 1<<8

var (
	keyFindCoordinator = (&kmsg.FindCoordinatorRequest{}).Key()
	keyJoinGroup       = (&kmsg.JoinGroupRequest{}).Key()
	keySyncGroup       = (&kmsg.SyncGroupRequest{}).Key()
	keyHeartbeat       = (&kmsg.HeartbeatRequest{}).Key()
	keyLeaveGroup      = (&kmsg.LeaveGroupRequest{}).Key()
	keyOffsetCommit    = (&kmsg.OffsetCommitRequest{}).Key()
	keyOffsetFetch     = (&kmsg.OffsetFetchRequest{}).Key()
	keyDescribeGroups  = (&kmsg.DescribeGroupsRequest{}).Key()
	keyListGroups      = (&kmsg.ListGroupsRequest{}).Key()
)

func errMsg(code int16, v, from int16, msg string) *string {
	if code == errNone || v < from {
		return nil
	}
	return &msg
}

// FindCoordinator v0–v3: the coordinator of every group is the leader of
// the offsets stream. Key type 1 (transactions) → INVALID_REQUEST: VDL has
// no transaction coordinator.
func handleFindCoordinator(s *Session, sl *slot, kreq kmsg.Request, _ int64) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.NodeID, resp.Port = -1, -1
	code, msg := errNone, ""
	info, ok := s.be.Stream(s.groups.topic)
	switch {
	case sl.version >= 1 && req.CoordinatorType != 0:
		code, msg = errInvalidRequest, "VDL has no transaction coordinator"
	case !ok:
		code, msg = group.ErrCoordinatorNotAvailable, "the offsets stream "+s.groups.topic+" is not configured"
	case info.Leader < 0:
		code, msg = group.ErrCoordinatorNotAvailable, "the offsets stream has no leader"
	default:
		code, msg = group.ErrCoordinatorNotAvailable, fmt.Sprintf("coordinator %d is not an advertised broker", info.Leader)
		for _, b := range s.be.Brokers() {
			if b.NodeID == info.Leader {
				resp.NodeID, resp.Host, resp.Port = b.NodeID, b.Host, b.Port
				code = errNone
			}
		}
	}
	resp.ErrorCode = code
	resp.ErrorMessage = errMsg(code, sl.version, 1, msg)
	s.finish(sl, resp)
}

// waitOp parks a JoinGroup or SyncGroup until its waiter is done.
type waitOp struct {
	sl     *slot
	w      *group.Waiter
	answer func(*group.Waiter) kmsg.Response
	groups *Groups
}

func (op *waitOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	s.groups.mu.Lock()
	s.groups.access(now) // timeouts, lost leadership
	done := op.w.Done()
	s.groups.mu.Unlock()
	if done {
		s.finish(op.sl, op.answer(op.w))
	}
}

func (op *waitOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.groups.nextDeadline()
}

func (op *waitOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return []<-chan struct{}{op.w.Ready()}
}

// JoinGroup v0–v4. v0's rebalance timeout is its session timeout; v4 gets
// MEMBER_ID_REQUIRED (with the assigned id) on a first join.
func handleJoinGroup(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.JoinGroupRequest)
	jr := group.JoinRequest{
		Group: req.Group, MemberID: req.MemberID, ClientID: s.clientID, ClientHost: s.clientHost,
		SessionTimeout:       int64(req.SessionTimeoutMillis) * 1e6,
		RebalanceTimeout:     int64(req.RebalanceTimeoutMillis) * 1e6,
		ProtocolType:         req.ProtocolType,
		RequireKnownMemberID: sl.version >= 4,
	}
	if sl.version == 0 {
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	answer := func(w *group.Waiter) kmsg.Response {
		r := w.Join()
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.Generation, resp.LeaderID, resp.MemberID = r.Err, r.Generation, r.Leader, r.MemberID
		proto := r.Protocol
		resp.Protocol = &proto
		for _, m := range r.Members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.ProtocolMetadata = m.MemberID, m.Metadata
			resp.Members = append(resp.Members, rm)
		}
		return resp
	}
	s.groups.mu.Lock()
	var w *group.Waiter
	if req.Group == "" {
		w = s.groups.c.Join(now, jr) // INVALID_GROUP_ID before coordinator checks, as Kafka
	} else if code := s.groups.access(now); code != errNone {
		w = failedJoin(code, req.MemberID)
	} else {
		w = s.groups.c.Join(now, jr)
	}
	s.groups.mu.Unlock()
	s.parkGroup(sl, w, answer)
}

func failedJoin(code int16, memberID string) *group.Waiter {
	return group.Failed(group.JoinResult{Err: code, Generation: -1, MemberID: memberID}, group.SyncResult{Err: code})
}

func (s *Session) parkGroup(sl *slot, w *group.Waiter, answer func(*group.Waiter) kmsg.Response) {
	if w.Done() {
		s.finish(sl, answer(w))
		return
	}
	sl.op = &waitOp{sl: sl, w: w, answer: answer, groups: s.groups}
}

// SyncGroup v0–v2: the leader's assignment is delivered to every member;
// members park until the leader's SyncGroup arrives.
func handleSyncGroup(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.SyncGroupRequest)
	var as []group.Assignment
	for _, a := range req.GroupAssignment {
		as = append(as, group.Assignment{MemberID: a.MemberID, Assignment: a.MemberAssignment})
	}
	answer := func(w *group.Waiter) kmsg.Response {
		r := w.Sync()
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = r.Err
		resp.MemberAssignment = r.Assignment
		if resp.MemberAssignment == nil {
			resp.MemberAssignment = []byte{}
		}
		return resp
	}
	s.groups.mu.Lock()
	var w *group.Waiter
	if req.Group == "" {
		w = s.groups.c.Sync(now, req.Group, req.Generation, req.MemberID, as)
	} else if code := s.groups.access(now); code != errNone {
		w = failedJoin(code, req.MemberID)
	} else {
		w = s.groups.c.Sync(now, req.Group, req.Generation, req.MemberID, as)
	}
	s.groups.mu.Unlock()
	s.parkGroup(sl, w, answer)
}

// groupCall runs f under the coordinator lock after the coordinator checks
// (a non-empty group id; an empty one is left to f, which answers
// INVALID_GROUP_ID as Kafka does before any coordinator check).
func (s *Session) groupCall(now int64, groupID string, f func() int16) int16 {
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	if groupID != "" {
		if code := s.groups.access(now); code != errNone {
			return code
		}
	}
	return f()
}

// Heartbeat v0–v2.
func handleHeartbeat(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.ErrorCode = s.groupCall(now, req.Group, func() int16 {
		return s.groups.c.Heartbeat(now, req.Group, req.Generation, req.MemberID)
	})
	s.finish(sl, resp)
}

// LeaveGroup v0–v2 (one member per request).
func handleLeaveGroup(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.ErrorCode = s.groupCall(now, req.Group, func() int16 {
		return s.groups.c.Leave(now, req.Group, req.MemberID)
	})
	s.finish(sl, resp)
}

// OffsetCommit v0–v6. v0 commits are simple commits (no generation or
// member); v1 per-partition timestamps (-1: now) become the commit time;
// v2–v4 retention times are accepted and ignored (offsets are kept until
// deleted by management); v6 leader epochs are stored and returned by
// OffsetFetch. Errors: the group's (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// REBALANCE_IN_PROGRESS, NOT_COORDINATOR...) for every partition; per
// partition UNKNOWN_TOPIC_OR_PARTITION and OFFSET_METADATA_TOO_LARGE; the
// write's: not leader → NOT_COORDINATOR, backpressure →
// COORDINATOR_NOT_AVAILABLE, too large → INVALID_COMMIT_OFFSET_SIZE,
// timeout → REQUEST_TIMED_OUT.
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
				rp.ErrorCode = errUnknownTopicOrPartition
			case len(meta) > maxMeta:
				rp.ErrorCode = group.ErrOffsetMetadataTooLarge
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
	s.be.Produce(s.groups.topic, group.EncodeCommits(op.commits, wall), func(base int64, err error) {
		notify(Completion{Token: tok, Base: base, Err: err})
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

func (op *commitOp) complete(s *Session, base int64, err error, _ int64) {
	if op.sl.done {
		return
	}
	if err != nil {
		code := errorCode(err, 0)
		switch code {
		case errNotLeaderForPartition:
			code = group.ErrNotCoordinator
		case errNotEnoughReplicas, errUnknownTopicOrPartition, errLeaderNotAvailable:
			code = group.ErrCoordinatorNotAvailable
		case errMessageTooLarge:
			code = group.ErrInvalidCommitOffsetSize
		}
		op.setAll(code)
	} else {
		s.groups.mu.Lock()
		for i, c := range op.commits {
			o := c.Offset
			s.groups.c.ApplyOffset(c.Key, &o, base+int64(i))
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
	op.setAll(errRequestTimedOut)
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

// OffsetFetch v0–v6. A partition without a committed offset gets offset
// -1, empty metadata and no error; v2+ null topics means every committed
// offset of the group; v2+ carry a top-level error (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS...), v0–v1 carry it in every partition;
// v5+ leader epochs are the committed ones (-1 when none).
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
		code = group.ErrNotCoordinator // leadership not confirmed since the request arrived
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

// DescribeGroups v0–v3. An unknown group is reported Dead with no error (as
// Kafka); the protocol and member metadata/assignments only when Stable;
// v3 authorized operations when asked (no authorizer: all group ops).
func handleDescribeGroups(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := kmsg.NewPtrDescribeGroupsResponse()
	s.groups.mu.Lock()
	code := s.groups.access(now)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		rg.AuthorizedOperations = opsNotRequested
		if sl.version >= 3 && req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = groupAuthorizedOps
		}
		if code != errNone {
			rg.ErrorCode = code
			rg.Members = []kmsg.DescribeGroupsResponseGroupMember{}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		sum := s.groups.c.Describe(id)
		rg.State, rg.ProtocolType, rg.Protocol = string(sum.State), sum.ProtocolType, sum.Protocol
		rg.Members = []kmsg.DescribeGroupsResponseGroupMember{}
		for _, m := range sum.Members {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost = m.MemberID, m.ClientID, m.ClientHost
			rm.ProtocolMetadata, rm.MemberAssignment = m.Metadata, m.Assignment
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	s.groups.mu.Unlock()
	s.finish(sl, resp)
}

// ListGroups v0–v3: every group this server coordinates (with members or
// with committed offsets); a server that does not coordinate lists none.
func handleListGroups(s *Session, sl *slot, _ kmsg.Request, now int64) {
	resp := kmsg.NewPtrListGroupsResponse()
	resp.Groups = []kmsg.ListGroupsResponseGroup{}
	s.groups.mu.Lock()
	switch code := s.groups.access(now); code {
	case errNone:
		for _, l := range s.groups.c.List() {
			rg := kmsg.NewListGroupsResponseGroup()
			rg.Group, rg.ProtocolType = l.Group, l.ProtocolType
			resp.Groups = append(resp.Groups, rg)
		}
	case group.ErrNotCoordinator:
	default:
		resp.ErrorCode = code
	}
	s.groups.mu.Unlock()
	s.finish(sl, resp)
}
