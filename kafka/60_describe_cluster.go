package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster v0 (modern profile only; flexible; Kafka 2.8's API,
// served because admin clients use it to list brokers): the brokers the
// backend advertises (Metadata's), the cluster id ("" when not configured:
// the field is not nullable), the controller id Metadata reports, and the
// cluster's authorized operations when asked (every one: no authorizer),
// else -2147483648.
var describeClusterAPI = api{
	key:      kmsg.DescribeCluster,
	modern:   upTo(0),
	handle:   handleDescribeCluster,
	shape:    describeClusterShape,
	shapeMax: 0,
}

// describeClusterShape walks the request layout (checkShape).
func describeClusterShape(r *shapeReader, _ int16) {
	r.i8()
	r.endStruct()
}

func handleDescribeCluster(s *Session, sl *slot, kreq kmsg.Request, _ int64) {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.ClusterID = s.cfg.ClusterID
	resp.ControllerID = s.be.Controller()
	resp.ClusterAuthorizedOperations = opsNotRequested
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = clusterAuthorizedOps
	}
	for _, b := range s.brokers() {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	s.finish(sl, resp)
}
