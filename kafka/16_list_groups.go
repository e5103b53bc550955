package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups v0–v3: every group this server coordinates (with members or
// with committed offsets); a server that does not coordinate lists none.
var listGroupsAPI = api{
	key:       kmsg.ListGroups,
	modern:    upTo(3),
	kafka0102: upTo(0),
	handle:    handleListGroups,
	shape:     listGroupsShape,
	shapeMax:  3,
}

// listGroupsShape walks the request layout (checkShape).
func listGroupsShape(r *shapeReader, v int16) {
	r.endStruct()
}

// handleListGroups answers at once.
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
	case kerr.NotCoordinator.Code:
	default:
		resp.ErrorCode = code
	}
	s.groups.mu.Unlock()
	s.finish(sl, resp)
}
