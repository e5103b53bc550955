package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// Heartbeat v0–v4: v3+ carries group.instance.id (FENCED_INSTANCE_ID for a
// stale member id of a static member); v4 is v3 flexible.
var heartbeatAPI = api{
	key:       kmsg.Heartbeat,
	modern:    upTo(4),
	kafka0102: upTo(0),
	handle:    handleHeartbeat,
	shape:     heartbeatShape,
	shapeMax:  4,
}

// heartbeatShape walks the request layout (checkShape).
func heartbeatShape(r *shapeReader, v int16) {
	r.str(false)
	r.i32()
	r.str(false)
	if v >= 3 {
		r.str(true) // group instance id
	}
	r.endStruct()
}

// handleHeartbeat answers at once.
func handleHeartbeat(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.ErrorCode = s.groupCall(now, req.Group, func() int16 {
		if code := s.groups.c.Fenced(req.Group, req.MemberID, instanceOf(req.InstanceID)); code != errNone {
			return code
		}
		return s.groups.c.Heartbeat(now, req.Group, req.Generation, req.MemberID)
	})
	s.finish(sl, resp)
}
