package kafka

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics v0–v5 (modern profile, Kafka 2.4's): each topic is a stream created
// through the config servers (StreamAdmin). A VDL stream is one partition:
// num_partitions other than 1 (or -1, the default) is INVALID_PARTITIONS;
// replication factor 3 or 5 (-1: 3), else INVALID_REPLICATION_FACTOR;
// manual replica assignments are INVALID_REQUEST (placement is the config
// servers'). Configs: retention.ms, retention.bytes, cleanup.policy
// (delete only) and VDL's preferred.dc; any other is INVALID_CONFIG.
// validate_only (v1+) checks the request here without creating. A name
// twice in one request: INVALID_REQUEST for both. The config servers'
// refusals: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
// INVALID_REPLICATION_FACTOR (not enough servers up). A server without
// config servers: POLICY_VIOLATION. Past the timeout: REQUEST_TIMED_OUT
// (the stream may still be created).
var createTopicsAPI = api{
	key:      kmsg.CreateTopics,
	modern:   upTo(5),
	handle:   handleCreateTopics,
	shape:    createTopicsShape,
	shapeMax: 6,
}

// createTopicsShape walks the request layout (checkShape).
func createTopicsShape(r *shapeReader, v int16) {
	r.array(false, func() {
		r.str(false) // topic
		r.i32()      // partitions
		r.i16()      // replication factor
		r.array(false, func() {
			r.i32()
			r.array(false, func() { r.i32() })
			r.endStruct()
		})
		r.array(false, func() {
			r.str(false)
			r.str(true)
			r.endStruct()
		})
		r.endStruct()
	})
	r.i32() // timeout
	if v >= 1 {
		r.i8() // validate only
	}
	r.endStruct()
}

func handleCreateTopics(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := kmsg.NewPtrCreateTopicsResponse()
	adm, ok := s.be.(StreamAdmin)
	count := map[string]int{}
	for _, t := range req.Topics {
		count[t.Topic]++
	}
	var asks []CreateStream
	var at []int
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, 1, t.ReplicationFactor
		cs, code, msg := createRequest(t)
		switch {
		case count[t.Topic] > 1:
			code, msg = kerr.InvalidRequest.Code, "the topic is named more than once in this request"
		case code == errNone && !ok:
			code, msg = kerr.PolicyViolation.Code, "this cluster's streams are configured on its servers, not created at runtime (it has no config servers)"
		}
		if code == errNone && !req.ValidateOnly {
			asks = append(asks, cs)
			at = append(at, len(resp.Topics))
		}
		rt.ErrorCode, rt.ErrorMessage = code, errMsg(code, sl.version, 1, msg)
		resp.Topics = append(resp.Topics, rt)
	}
	if len(asks) == 0 {
		s.finish(sl, resp)
		return
	}
	op := &adminOp{sl: sl, dl: now + adminTimeout(req.TimeoutMillis), done: make(chan struct{})}
	op.answer = func(errs []error, timedOut bool) {
		for k, i := range at {
			code, msg := kerr.RequestTimedOut.Code, "the stream was not created within the request's timeout; it may still be"
			if !timedOut {
				code, msg = adminCode(errs[k])
			}
			resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = code, errMsg(code, sl.version, 1, msg)
		}
		s.finish(sl, resp)
	}
	sl.op = op
	adm.CreateStreams(asks, func(errs []error) {
		op.errs = errs
		close(op.done)
	})
}

// createRequest checks one topic of a CreateTopics request.
func createRequest(t kmsg.CreateTopicsRequestTopic) (CreateStream, int16, string) {
	cs := CreateStream{Name: t.Topic}
	switch {
	case t.NumPartitions != 1 && t.NumPartitions != -1:
		return cs, kerr.InvalidPartitions.Code, fmt.Sprintf("%d partitions: a VDL stream is one partition (ask for 1)", t.NumPartitions)
	case len(t.ReplicaAssignment) > 0:
		return cs, kerr.InvalidRequest.Code, "manual replica assignment is not supported: the config servers place replicas"
	case t.ReplicationFactor != -1 && t.ReplicationFactor != 3 && t.ReplicationFactor != 5:
		return cs, kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor %d: VDL streams have 3 or 5 replicas", t.ReplicationFactor)
	}
	cs.ReplicationFactor = max(int(t.ReplicationFactor), 0)
	for _, c := range t.Configs {
		v := ""
		if c.Value != nil {
			v = *c.Value
		}
		if code, msg := setConfig(&cs, c.Name, v); code != errNone {
			return cs, code, msg
		}
	}
	return cs, errNone, ""
}

func setConfig(cs *CreateStream, name, v string) (int16, string) {
	switch name {
	case "retention.ms", "retention.bytes":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return kerr.InvalidConfig.Code, fmt.Sprintf("%s %q is not a number", name, v)
		}
		if name == "retention.ms" {
			cs.RetentionMs = &n
		} else {
			cs.RetentionBytes = &n
		}
	case "cleanup.policy":
		if v != "delete" {
			return kerr.InvalidConfig.Code, fmt.Sprintf("cleanup.policy %q: VDL streams support delete only", v)
		}
	case "preferred.dc":
		cs.PreferredDC = v
	default:
		return kerr.InvalidConfig.Code, fmt.Sprintf("config %q is not supported (retention.ms, retention.bytes, cleanup.policy, preferred.dc)", name)
	}
	return errNone, ""
}
