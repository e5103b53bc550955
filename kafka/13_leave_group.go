package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// LeaveGroup v0–v4. v0–v2: one member per request. v3+ (KIP-345): a batch
// of members, each by member id or, for a static member, by
// group.instance.id (its member id may be empty), with an error per member
// (FENCED_INSTANCE_ID when the instance id belongs to another member id,
// UNKNOWN_MEMBER_ID when neither is known); v4 is v3 flexible.
var leaveGroupAPI = api{
	key:       kmsg.LeaveGroup,
	modern:    upTo(4),
	kafka0102: upTo(0),
	handle:    handleLeaveGroup,
	shape:     leaveGroupShape,
	shapeMax:  4,
}

// leaveGroupShape walks the request layout (checkShape).
func leaveGroupShape(r *shapeReader, v int16) {
	r.str(false)
	if v < 3 {
		r.str(false)
	} else {
		r.array(false, func() {
			r.str(false)
			r.str(true)
			r.endStruct()
		})
	}
	r.endStruct()
}

// handleLeaveGroup answers at once.
func handleLeaveGroup(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := kmsg.NewPtrLeaveGroupResponse()
	if sl.version < 3 {
		resp.ErrorCode = s.groupCall(now, req.Group, func() int16 {
			return s.groups.c.Leave(now, req.Group, req.MemberID)
		})
		s.finish(sl, resp)
		return
	}
	ms := make([]group.LeaveMember, len(req.Members))
	for i, m := range req.Members {
		ms[i] = group.LeaveMember{MemberID: m.MemberID, InstanceID: instanceOf(m.InstanceID)}
	}
	var codes []int16
	resp.ErrorCode = s.groupCall(now, req.Group, func() int16 {
		var top int16
		top, codes = s.groups.c.LeaveMembers(now, req.Group, ms)
		return top
	})
	for i, m := range req.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
		if i < len(codes) {
			rm.ErrorCode = codes[i]
		}
		resp.Members = append(resp.Members, rm)
	}
	s.finish(sl, resp)
}
