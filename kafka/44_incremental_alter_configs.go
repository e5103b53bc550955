package kafka

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// IncrementalAlterConfigs v0–v1 (modern profile only; v1 is flexible):
// changes the listed configs of a stream and leaves the others as they
// are, with one replicated config command through the stream's Raft group,
// answered after the commit. SET (0) sets a value (checked as AlterConfigs
// checks it: INVALID_CONFIG with a message, cleanup.policy=compact
// included); DELETE (1) removes the override (back to the default).
// APPEND (2) and SUBTRACT (3) apply to list configs, and the only list
// served, cleanup.policy, has one legal value: APPEND delete is a SET,
// anything else INVALID_CONFIG. A resource with any bad config changes
// nothing. Resources and validate_only as AlterConfigs.
var incrementalAlterConfigsAPI = api{
	key:      kmsg.IncrementalAlterConfigs,
	modern:   upTo(1),
	handle:   handleIncrementalAlterConfigs,
	shape:    incrementalAlterConfigsShape,
	shapeMax: 1,
}

func incrementalAlterConfigsShape(r *shapeReader, _ int16) { alterShape(r, true) }

func handleIncrementalAlterConfigs(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	rs := make([]alterResource, len(req.Resources))
	for i, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		resp.Resources = append(resp.Resources, rr)
		rs[i] = s.alterTarget(r.ResourceType, r.ResourceName)
		var names []string
		for _, c := range r.Configs {
			if rs[i].err != nil {
				break
			}
			if slices.Contains(names, c.Name) {
				rs[i].err = &configError{kerr.InvalidRequest.Code, fmt.Sprintf("config %q listed twice", c.Name)}
				break
			}
			names = append(names, c.Name)
			value := ""
			if c.Value != nil {
				value = *c.Value
			}
			switch c.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				rs[i].err = checkStreamConfig(c.Name, value)
				rs[i].changes = append(rs[i].changes, ConfigChange{Key: c.Name, Value: value})
			case kmsg.IncrementalAlterConfigOpDelete:
				rs[i].err = checkStreamConfigName(c.Name)
				rs[i].changes = append(rs[i].changes, ConfigChange{Key: c.Name, Delete: true})
			case kmsg.IncrementalAlterConfigOpAppend:
				if c.Name != ConfigCleanupPolicy || value != "delete" {
					rs[i].err = invalidConfig("APPEND %s=%s: only cleanup.policy is a list, and its only value is delete", c.Name, value)
				}
				rs[i].changes = append(rs[i].changes, ConfigChange{Key: c.Name, Value: value})
			case kmsg.IncrementalAlterConfigOpSubtract:
				rs[i].err = invalidConfig("SUBTRACT %s: cleanup.policy cannot be left without delete (VDL streams are never compacted)", c.Name)
			default:
				rs[i].err = &configError{kerr.InvalidRequest.Code, fmt.Sprintf("unknown config operation %d", c.Op)}
			}
		}
	}
	setErr := func(i int, code int16, msg *string) {
		resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = code, msg
	}
	s.startAlters(sl, resp, setErr, rs, req.ValidateOnly, now)
}
