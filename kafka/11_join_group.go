package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// JoinGroup v0–v6. v0's rebalance timeout is its session timeout; v4+ gets
// MEMBER_ID_REQUIRED (with the assigned id) on a first join of a dynamic
// member; v5+ carries group.instance.id (static membership, KIP-345: a
// restarted member keeps its assignment without a rebalance; a stale member
// id for an instance id → FENCED_INSTANCE_ID), and the leader's member list
// carries each member's instance id; v6 is v5 flexible.
var joinGroupAPI = api{
	key:       kmsg.JoinGroup,
	modern:    upTo(6),
	kafka0102: upTo(1),
	handle:    handleJoinGroup,
	shape:     joinGroupShape,
	shapeMax:  6,
}

// joinGroupShape walks the request layout (checkShape).
func joinGroupShape(r *shapeReader, v int16) {
	r.str(false) // group
	r.i32()      // session timeout
	if v >= 1 {
		r.i32() // rebalance timeout
	}
	r.str(false) // member id
	if v >= 5 {
		r.str(true) // group instance id
	}
	r.str(false) // protocol type
	r.array(false, func() {
		r.str(false)
		r.bytes(false)
		r.endStruct()
	})
	r.endStruct()
}

// handleJoinGroup parks the request until the group's rebalance answers it.
func handleJoinGroup(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.JoinGroupRequest)
	jr := group.JoinRequest{
		Group: req.Group, MemberID: req.MemberID, ClientID: s.clientID, ClientHost: s.clientHost,
		SessionTimeout:       int64(req.SessionTimeoutMillis) * 1e6,
		RebalanceTimeout:     int64(req.RebalanceTimeoutMillis) * 1e6,
		ProtocolType:         req.ProtocolType,
		RequireKnownMemberID: sl.version >= 4,
		InstanceID:           instanceOf(req.InstanceID),
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
			if m.InstanceID != "" {
				rm.InstanceID = new(m.InstanceID)
			}
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
