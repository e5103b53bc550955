package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
)

func epochReq(v int16, current, epoch int32) *kmsg.OffsetForLeaderEpochRequest {
	r := kmsg.NewPtrOffsetForLeaderEpochRequest()
	r.Version, r.ReplicaID = v, -1
	t := kmsg.NewOffsetForLeaderEpochRequestTopic()
	t.Topic = "a"
	p := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	p.CurrentLeaderEpoch, p.LeaderEpoch = current, epoch
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

// Epochs 0 (offsets 0-1), 3 (2-4) and 5 (5): OffsetForLeaderEpoch answers
// the largest epoch ≤ the one asked and where it ends; current epochs are
// checked as Kafka checks them; Fetch and ListOffsets check them too and
// stored batches carry the epoch they were written in.
func TestLeaderEpochs(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	st := h.be.StreamByName("a")
	h.produceOK(8, "a", "x", "y")
	st.SetEpoch(3)
	h.produceOK(8, "a", "x", "y", "z")
	st.SetEpoch(5)
	h.produceOK(8, "a", "w")

	for _, c := range []struct {
		v, current, epoch int32
		code              int16
		le                int32
		end               int64
	}{
		{3, -1, 0, 0, 0, 2},
		{3, 5, 2, 0, 0, 2},
		{3, 5, 3, 0, 3, 5},
		{3, 5, 4, 0, 3, 5},
		{3, 5, 5, 0, 5, 6},
		{3, 5, 6, 0, -1, -1}, // newer than the leader's
		{3, 5, -1, 0, -1, -1},
		{3, 4, 3, kerr.FencedLeaderEpoch.Code, -1, -1},
		{3, 6, 3, kerr.UnknownLeaderEpoch.Code, -1, -1},
		{1, 9, 3, 0, 3, 5}, // v1 has no current epoch
	} {
		h.send(epochReq(int16(c.v), c.current, c.epoch))
		got := h.take()
		require.Len(t, got, 1)
		p := got[0].resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
		require.Equal(t, [3]int64{int64(c.code), int64(c.le), c.end}, [3]int64{int64(p.ErrorCode), int64(p.LeaderEpoch), p.EndOffset}, "%+v", c)
	}

	// Fetch v9+ checks current_leader_epoch.
	for _, c := range []struct {
		current int32
		code    int16
	}{{-1, 0}, {5, 0}, {4, kerr.FencedLeaderEpoch.Code}, {6, kerr.UnknownLeaderEpoch.Code}} {
		f := fetchReq(11, 0, 0, fetchPart{topic: "a", offset: 2})
		f.Topics[0].Partitions[0].CurrentLeaderEpoch = c.current
		h.send(f)
		p := onlyFetchPartition(t, h.take()[0])
		require.Equal(t, c.code, p.ErrorCode, "current %d", c.current)
		if c.code == 0 {
			require.Equal(t, int32(3), batchfmt.LeaderEpoch(p.RecordBatches), "stamped with the epoch it was written in")
		}
	}

	// ListOffsets v4+: checks, and the epoch of the offset answered.
	for _, c := range []struct {
		current int32
		ts      int64
		code    int16
		off     int64
		epoch   int32
	}{{-1, -2, 0, 0, 0}, {5, -1, 0, 6, 5}, {-1, 1000, 0, 0, 0}, {4, -1, kerr.FencedLeaderEpoch.Code, -1, -1}, {7, -1, kerr.UnknownLeaderEpoch.Code, -1, -1}} {
		lo := listLatestReq("a")
		lo.Topics[0].Partitions[0].CurrentLeaderEpoch = c.current
		lo.Topics[0].Partitions[0].Timestamp = c.ts
		h.send(lo)
		p := h.take()[0].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		require.Equal(t, [3]int64{int64(c.code), c.off, int64(c.epoch)}, [3]int64{int64(p.ErrorCode), p.Offset, int64(p.LeaderEpoch)}, "%+v", c)
	}

	// Metadata v7+ reports the epoch.
	m := kmsg.NewPtrMetadataRequest()
	m.Version = 9
	h.send(m)
	md := h.take()[0].resp.(*kmsg.MetadataResponse)
	require.Equal(t, int32(5), md.Topics[0].Partitions[0].LeaderEpoch)
}
