package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeGroups v0–v5. An unknown group is reported Dead with no error (as
// Kafka); the protocol and member metadata/assignments only when Stable;
// v3+ authorized operations when asked (no authorizer: all group ops); v4+
// each member's group.instance.id (null for dynamic members); v5 is v4
// flexible.
var describeGroupsAPI = api{
	key:       kmsg.DescribeGroups,
	modern:    upTo(5),
	kafka0102: upTo(0),
	handle:    handleDescribeGroups,
	shape:     describeGroupsShape,
	shapeMax:  5,
}

// groupAuthorizedOps: READ, DELETE, DESCRIBE (no authorizer: all allowed).
const groupAuthorizedOps = 1<<3 | 1<<6 | 1<<8

// describeGroupsShape walks the request layout (checkShape).
func describeGroupsShape(r *shapeReader, v int16) {
	r.array(false, func() { r.str(false) })
	if v >= 3 {
		r.i8()
	}
	r.endStruct()
}

// handleDescribeGroups answers at once.
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
			if m.InstanceID != "" {
				rm.InstanceID = new(m.InstanceID)
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	s.groups.mu.Unlock()
	s.finish(sl, resp)
}
