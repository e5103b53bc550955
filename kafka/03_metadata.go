package kafka

import (
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AclOperation bits reported in Metadata v8+ when asked for: VDL has no
// authorizer, so every operation meaningful for the resource is allowed
// (what Kafka reports without an authorizer).
const (
	topicAuthorizedOps   = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<10 | 1<<11 // READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
	clusterAuthorizedOps = 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12       // CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
	opsNotRequested      = math.MinInt32
)

// Metadata v0–v9. All topics: a null topic array (v1+) or an empty one (v0).
// Topics are never auto-created: an unknown name gets
// UNKNOWN_TOPIC_OR_PARTITION. Every stream has exactly partition 0; with no
// leader it carries LEADER_NOT_AVAILABLE and leader -1. leader_epoch (v7+)
// is the stream's Raft term as this server knows it (KIP-320: clients send
// it back in Fetch, ListOffsets and OffsetForLeaderEpoch).
var metadataAPI = api{
	key:       kmsg.Metadata,
	modern:    upTo(9),
	kafka0102: upTo(2),
	handle:    handleMetadata,
	shape:     metadataShape,
	shapeMax:  9,
}

// metadataShape walks the request layout (checkShape).
func metadataShape(r *shapeReader, v int16) {
	r.array(v >= 1, func() {
		r.str(false)
		r.endStruct()
	})
	if v >= 4 {
		r.i8()
	}
	if v >= 8 {
		r.i8()
		r.i8()
	}
	r.endStruct()
}

// handleMetadata answers at once from the Backend.
func handleMetadata(s *Session, sl *slot, kreq kmsg.Request, _ int64) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := kmsg.NewPtrMetadataResponse()
	v := sl.version
	for _, b := range s.brokers() {
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	if s.cfg.ClusterID != "" {
		id := s.cfg.ClusterID
		resp.ClusterID = &id
	}
	resp.ControllerID = s.be.Controller()
	resp.AuthorizedOperations = opsNotRequested
	if v >= 8 && req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = clusterAuthorizedOps
	}

	var names []string
	if req.Topics == nil || (v == 0 && len(req.Topics) == 0) {
		// All topics: the internal offsets stream is left out (it is
		// answered, marked internal, when asked for by name).
		for _, n := range s.be.Streams() {
			if n != s.cfg.OffsetsTopic {
				names = append(names, n)
			}
		}
	} else {
		for _, t := range req.Topics {
			if t.Topic != nil && !slices.Contains(names, *t.Topic) {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, name := range names {
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = &name
		rt.AuthorizedOperations = opsNotRequested
		if v >= 8 && req.IncludeTopicAuthorizedOperations {
			rt.AuthorizedOperations = topicAuthorizedOps
		}
		info, ok := s.be.Stream(name)
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.IsInternal = name == s.cfg.OffsetsTopic
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition = 0
		p.Leader = info.Leader
		p.LeaderEpoch = info.LeaderEpoch
		p.Replicas = nonNil(info.Replicas)
		p.ISR = nonNil(info.ISR)
		p.OfflineReplicas = []int32{}
		if info.Leader < 0 {
			p.Leader = -1
			p.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		rt.Partitions = []kmsg.MetadataResponseTopicPartition{p}
		resp.Topics = append(resp.Topics, rt)
	}
	s.finish(sl, resp)
}

func nonNil(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}
