package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator v0–v3: the coordinator of every group is the leader of
// the offsets stream. Key type 1 (transactions) → INVALID_REQUEST: VDL has
// no transaction coordinator.
var findCoordinatorAPI = api{
	key:       kmsg.FindCoordinator,
	modern:    upTo(3),
	kafka0102: upTo(0),
	handle:    handleFindCoordinator,
	shape:     findCoordinatorShape,
	shapeMax:  3,
}

// findCoordinatorShape walks the request layout (checkShape).
func findCoordinatorShape(r *shapeReader, v int16) {
	r.str(false)
	if v >= 1 {
		r.i8()
	}
	r.endStruct()
}

// handleFindCoordinator names the offsets stream's leader.
func handleFindCoordinator(s *Session, sl *slot, kreq kmsg.Request, _ int64) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.NodeID, resp.Port = -1, -1
	code, msg := errNone, ""
	info, ok := s.be.Stream(s.groups.topic)
	switch {
	case sl.version >= 1 && req.CoordinatorType != 0:
		code, msg = kerr.InvalidRequest.Code, "VDL has no transaction coordinator"
	case !ok:
		code, msg = kerr.CoordinatorNotAvailable.Code, "the offsets stream "+s.groups.topic+" is not configured"
	case info.Leader < 0:
		code, msg = kerr.CoordinatorNotAvailable.Code, "the offsets stream has no leader"
	default:
		code, msg = kerr.CoordinatorNotAvailable.Code, fmt.Sprintf("coordinator %d is not an advertised broker", info.Leader)
		for _, b := range s.brokers() {
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
