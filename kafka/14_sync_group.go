package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// SyncGroup v0–v4: the leader's assignment is delivered to every member;
// members park until the leader's SyncGroup arrives. v3+ carries
// group.instance.id (FENCED_INSTANCE_ID for a stale member id of a static
// member); v4 is v3 flexible.
var syncGroupAPI = api{
	key:       kmsg.SyncGroup,
	modern:    upTo(4),
	kafka0102: upTo(0),
	handle:    handleSyncGroup,
	shape:     syncGroupShape,
	shapeMax:  4,
}

// syncGroupShape walks the request layout (checkShape).
func syncGroupShape(r *shapeReader, v int16) {
	r.str(false)
	r.i32()
	r.str(false)
	if v >= 3 {
		r.str(true) // group instance id
	}
	r.array(false, func() {
		r.str(false)
		r.bytes(false)
		r.endStruct()
	})
	r.endStruct()
}

// handleSyncGroup parks the request until the leader's assignment is there.
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
	} else if code := s.groups.c.Fenced(req.Group, req.MemberID, instanceOf(req.InstanceID)); code != errNone {
		w = failedJoin(code, req.MemberID)
	} else {
		w = s.groups.c.Sync(now, req.Group, req.Generation, req.MemberID, as)
	}
	s.groups.mu.Unlock()
	s.parkGroup(sl, w, answer)
}

// groupCall runs f under the coordinator lock after the coordinator checks
// (a non-empty group id; an empty one is left to f, which answers
