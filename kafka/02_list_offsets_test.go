package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

func TestListOffsetsByTime(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1000, "old", "old2")))
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 5000, "new")))
	h.take()
	for _, c := range []struct{ ts, off, at int64 }{{0, 0, 1001}, {3000, 2, 5000}, {9000, -1, -1}} {
		lo := kmsg.NewPtrListOffsetsRequest()
		lo.Version = 4
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "a"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = c.ts
		lt.Partitions = append(lt.Partitions, lp)
		lo.Topics = append(lo.Topics, lt)
		h.send(lo)
		p := h.take()[0].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		require.Equal(t, c.off, p.Offset, "ts %d", c.ts)
		require.Equal(t, c.at, p.Timestamp, "ts %d", c.ts)
		if c.off >= 0 {
			require.Equal(t, int32(0), p.LeaderEpoch, "the epoch the records were written in")
		} else {
			require.Equal(t, int32(-1), p.LeaderEpoch)
		}
	}
}

func listLatestReq(topic string) *kmsg.ListOffsetsRequest {
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 5
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	return lo
}

// ListOffsets answers only after its read fence: a leader that was cut off
// (its fence fails or never completes) says NOT_LEADER_FOR_PARTITION rather
// than a stale high watermark.
func TestListOffsetsWaitsForReadFence(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", "x", "y")
	st := h.be.StreamByName("a")

	release := st.HoldFences()
	h.send(listLatestReq("a"))
	require.Empty(t, h.take(), "no answer before the fence passes")
	require.NotEmpty(t, h.out.Wait, "the driver is told what to wait on")
	release(nil)
	h.s.Poll(h.now)
	got := h.take()
	require.Len(t, got, 1)
	p := got[0].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(2), p.Offset)

	release = st.HoldFences()
	h.send(listLatestReq("a"))
	release(kafka.ErrNotLeader)
	h.s.Poll(h.now)
	got = h.take()
	require.Len(t, got, 1)
	require.Equal(t, kerr.NotLeaderForPartition.Code, got[0].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode)

	st.HoldFences() // never released: a quorum that does not answer
	h.send(listLatestReq("a"))
	require.Empty(t, h.take())
	h.now += 2e9
	h.s.Poll(h.now)
	got = h.take()
	require.Len(t, got, 1)
	require.Equal(t, kerr.NotLeaderForPartition.Code, got[0].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode)
}
