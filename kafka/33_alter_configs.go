package kafka

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AlterConfigs v0–v1 (modern profile only): replaces a stream's whole
// config (every override not listed goes back to its default, as Kafka's
// non-incremental AlterConfigs does) with one replicated config command
// through the stream's Raft group, answered after the commit. Names and
// values are checked first (configs.go): an unknown name, a bad value, or
// cleanup.policy=compact → INVALID_CONFIG with a message, and nothing of
// that resource changes. validate_only checks and changes nothing. Broker
// resources are read-only (INVALID_CONFIG); other resource types →
// INVALID_REQUEST; the offsets stream → INVALID_TOPIC_EXCEPTION; an
// unknown stream → UNKNOWN_TOPIC_OR_PARTITION. A null value deletes the
// override.
var alterConfigsAPI = api{
	key:      kmsg.AlterConfigs,
	modern:   upTo(1),
	handle:   handleAlterConfigs,
	shape:    alterConfigsShape,
	shapeMax: 1,
}

// alterConfigsShape walks the request layout (checkShape); incremental
// adds an op byte per config.
func alterConfigsShape(r *shapeReader, _ int16) { alterShape(r, false) }

func alterShape(r *shapeReader, incremental bool) {
	r.array(false, func() {
		r.i8()
		r.str(false)
		r.array(false, func() {
			r.str(false)
			if incremental {
				r.i8()
			}
			r.str(true)
			r.endStruct()
		})
		r.endStruct()
	})
	r.i8()
	r.endStruct()
}

func handleAlterConfigs(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := kmsg.NewPtrAlterConfigsResponse()
	rs := make([]alterResource, len(req.Resources))
	for i, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		resp.Resources = append(resp.Resources, rr)
		rs[i] = s.alterTarget(r.ResourceType, r.ResourceName)
		rs[i].reset = true
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
			if c.Value == nil {
				if e := checkStreamConfigName(c.Name); e != nil {
					rs[i].err = e
				}
				rs[i].changes = append(rs[i].changes, ConfigChange{Key: c.Name, Delete: true})
				continue
			}
			rs[i].err = checkStreamConfig(c.Name, *c.Value)
			rs[i].changes = append(rs[i].changes, ConfigChange{Key: c.Name, Value: *c.Value})
		}
	}
	setErr := func(i int, code int16, msg *string) {
		resp.Resources[i].ErrorCode, resp.Resources[i].ErrorMessage = code, msg
	}
	s.startAlters(sl, resp, setErr, rs, req.ValidateOnly, now)
}

// alterTarget resolves the resource an alter names: a stream, or an error.
func (s *Session) alterTarget(typ kmsg.ConfigResourceType, name string) alterResource {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		return alterResource{stream: name, err: s.topicConfigTarget(name)}
	case kmsg.ConfigResourceTypeBroker:
		return alterResource{err: invalidConfig("broker configs are read-only: they come from the server's configuration file")}
	}
	return alterResource{err: &configError{kerr.InvalidRequest.Code, fmt.Sprintf("resource type %d is not served (topic and broker are)", typ)}}
}

// checkStreamConfigName checks that name is a stream config (for a delete).
func checkStreamConfigName(name string) *configError {
	if slices.Contains(StreamConfigNames, name) {
		return nil
	}
	return checkStreamConfig(name, "")
}
