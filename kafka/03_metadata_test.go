package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

func TestTrapNullTopicsMeansAll(t *testing.T) {
	h := newHarness(t, kafka.Config{ClusterID: "vdl-1"})
	for v := int16(0); v <= 9; v++ {
		r := kmsg.NewPtrMetadataRequest()
		r.Version = v
		if v == 0 {
			r.Topics = []kmsg.MetadataRequestTopic{} // v0: empty = all
		}
		h.send(r)
		if v >= 1 {
			r2 := kmsg.NewPtrMetadataRequest()
			r2.Version = v
			r2.Topics = []kmsg.MetadataRequestTopic{} // v1+: empty = none
			h.send(r2)
		}
	}
	got := h.take()
	require.Len(t, got, 19)
	for _, g := range got {
		m := g.resp.(*kmsg.MetadataResponse)
		req := h.sent[g.corr].(*kmsg.MetadataRequest)
		if req.Topics != nil && req.Version >= 1 {
			require.Empty(t, m.Topics)
			continue
		}
		require.Len(t, m.Topics, 2, "v%d", req.Version)
		require.Equal(t, "a", *m.Topics[0].Topic)
		p := m.Topics[0].Partitions[0]
		require.Equal(t, int32(1), p.Leader)
		require.Equal(t, []int32{1}, p.Replicas)
		require.Equal(t, "127.0.0.1", m.Brokers[0].Host)
		if req.Version >= 1 {
			require.Equal(t, int32(1), m.ControllerID)
		}
		if req.Version >= 2 {
			require.Equal(t, "vdl-1", *m.ClusterID)
		}
		if req.Version >= 7 {
			require.Equal(t, int32(0), p.LeaderEpoch)
		}
		if req.Version >= 8 {
			require.Equal(t, int32(-2147483648), m.Topics[0].AuthorizedOperations)
		}
	}
}

func TestMetadataUnknownTopicAndNoLeader(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.StreamByName("b").SetLeader(-1)
	r := kmsg.NewPtrMetadataRequest()
	r.Version = 4
	r.AllowAutoTopicCreation = true
	for _, n := range []string{"nope", "b", "a"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(n)
		r.Topics = append(r.Topics, mt)
	}
	h.send(r)
	m := h.take()[0].resp.(*kmsg.MetadataResponse)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, m.Topics[0].ErrorCode)
	require.Equal(t, kerr.LeaderNotAvailable.Code, m.Topics[1].Partitions[0].ErrorCode)
	require.Equal(t, int32(-1), m.Topics[1].Partitions[0].Leader)
	require.Equal(t, int16(0), m.Topics[2].ErrorCode)
	require.Nil(t, h.be.StreamByName("nope"), "never auto-created")
}
