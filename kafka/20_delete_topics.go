package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics v0–v4 (modern profile, Kafka 2.4's; v6 names topics by id,
// which VDL does not have): each stream is deleted through the config servers
// (StreamAdmin); its replicas stop its group and remove its data. Unknown
// streams: UNKNOWN_TOPIC_OR_PARTITION; internal ones (__consumer_offsets):
// INVALID_REQUEST; a server without config servers: POLICY_VIOLATION. Past
// the timeout: REQUEST_TIMED_OUT (the stream may still be deleted).
var deleteTopicsAPI = api{
	key:      kmsg.DeleteTopics,
	modern:   upTo(4),
	handle:   handleDeleteTopics,
	shape:    deleteTopicsShape,
	shapeMax: 5,
}

// deleteTopicsShape walks the request layout (checkShape).
func deleteTopicsShape(r *shapeReader, v int16) {
	r.array(false, func() { r.str(false) })
	r.i32() // timeout
	r.endStruct()
}

func handleDeleteTopics(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := kmsg.NewPtrDeleteTopicsResponse()
	adm, ok := s.be.(StreamAdmin)
	var names []string
	for _, name := range req.TopicNames {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = &name
		if !ok {
			msg := "this cluster's streams are configured on its servers, not deleted at runtime (it has no config servers)"
			rt.ErrorCode, rt.ErrorMessage = kerr.PolicyViolation.Code, errMsg(kerr.PolicyViolation.Code, sl.version, 5, msg)
		}
		names = append(names, name)
		resp.Topics = append(resp.Topics, rt)
	}
	if !ok || len(names) == 0 {
		s.finish(sl, resp)
		return
	}
	op := &adminOp{sl: sl, dl: now + adminTimeout(req.TimeoutMillis), done: make(chan struct{})}
	op.answer = func(errs []error, timedOut bool) {
		for i := range resp.Topics {
			code, msg := kerr.RequestTimedOut.Code, "the stream was not deleted within the request's timeout; it may still be"
			if !timedOut {
				code, msg = adminCode(errs[i])
			}
			resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = code, errMsg(code, sl.version, 5, msg)
		}
		s.finish(sl, resp)
	}
	sl.op = op
	adm.DeleteStreams(names, func(errs []error) {
		op.errs = errs
		close(op.done)
	})
}
