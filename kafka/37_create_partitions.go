package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions v0–v1 (modern profile only): a VDL stream is one Raft
// group and exactly one partition, so every topic is answered
// INVALID_PARTITIONS with a message saying so (an unknown stream:
// UNKNOWN_TOPIC_OR_PARTITION), validate_only or not. Served so that admin
// tools get a clear answer rather than a closed connection.
var createPartitionsAPI = api{
	key:      kmsg.CreatePartitions,
	modern:   upTo(1),
	handle:   handleCreatePartitions,
	shape:    createPartitionsShape,
	shapeMax: 1,
}

// createPartitionsShape walks the request layout (checkShape).
func createPartitionsShape(r *shapeReader, _ int16) {
	r.array(false, func() {
		r.str(false)
		r.i32()
		r.array(true, func() {
			r.array(false, r.i32)
			r.endStruct()
		})
		r.endStruct()
	})
	r.i32()
	r.i8()
	r.endStruct()
}

func handleCreatePartitions(s *Session, sl *slot, kreq kmsg.Request, _ int64) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var msg string
		if !s.be.HasStream(t.Topic) {
			rt.ErrorCode, msg = kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("no stream %q", t.Topic)
		} else {
			rt.ErrorCode = kerr.InvalidPartitions.Code
			msg = fmt.Sprintf("stream %q has exactly one partition and always will: a VDL stream is one Raft group (create more streams to scale out)", t.Topic)
		}
		rt.ErrorMessage = &msg
		resp.Topics = append(resp.Topics, rt)
	}
	s.finish(sl, resp)
}
