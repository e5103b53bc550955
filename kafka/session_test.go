package kafka_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

func TestUnknownKeyOrVersionCloses(t *testing.T) {
	for name, frame := range map[string][]byte{
		"unknown key":         {0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff},
		"produce v9":          {0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0},
		"fetch v3 on 0.10":    nil,
		"join group on 0.10":  {0, 11, 0, 0, 0, 0, 0, 1, 0xff, 0xff},
		"negative version":    {0, 3, 0xff, 0xff, 0, 0, 0, 1, 0xff, 0xff},
		"short header":        {0, 3, 0, 0},
		"client id too long":  {0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0xff},
		"truncated body":      {0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 9},
		"huge array metadata": {0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff},
	} {
		if frame == nil {
			continue
		}
		h := newHarness(t, kafka.Config{Profile: kafka.ProfileKafka0102})
		// An earlier request is still answered before the close.
		h.send(kmsg.NewPtrMetadataRequest())
		h.s.Receive(0, frame)
		got := h.take()
		require.Len(t, got, 1, name)
		require.True(t, h.out.Close, name)
		require.NotEmpty(t, h.out.Reason, name)
	}
}

// A length of 0x7fffffff (or 0xffffffff) in any position must not make the
// server allocate by it.
func TestTrapHugeLengthsAllocateNothing(t *testing.T) {
	frames := [][]byte{
		// produce v3: null txn id, acks, timeout, topics count 0x7fffffff
		append([]byte{0, 0, 0, 3, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x13, 0x88, 0x7f, 0xff, 0xff, 0xff}, make([]byte, 1<<20)...),
		// fetch v4 with a topics count and an all-zero tail
		append([]byte{0, 1, 0, 4, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0x00, 0x0f, 0xff, 0xff}, make([]byte, 1<<20)...),
		// metadata v1 with 0xffffffff topics = null = all topics (legal)
		{0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	for i, f := range frames {
		h := newHarness(t, kafka.Config{})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h.s.Receive(0, f)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "frame %d", i)
		out := h.s.Take()
		if i < 2 {
			require.True(t, out.Close, "frame %d", i)
		} else {
			require.False(t, out.Close)
		}
	}
}

func TestTrapResponsesInOrderUnderOutOfOrderCompletion(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.SetManual(true)
	c1 := h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "a1")))
	c2 := h.send(produceReq(8, -1, "b", makeBatch(t, 0, -1, 1, "b1")))
	c3 := h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "a2")))
	c4 := h.send(kmsg.NewPtrMetadataRequest())
	pend := h.be.TakePending()
	require.Len(t, pend, 3, "pipelined: all submitted before any completes")
	pend[2].Commit()
	pend[1].Commit()
	require.Empty(t, h.take(), "nothing before the first completes")
	require.Equal(t, 4, h.s.Pending())
	pend[0].Commit()
	got := h.take()
	require.Len(t, got, 4)
	for i, c := range []int32{c1, c2, c3, c4} {
		require.Equal(t, c, got[i].corr)
	}
	require.Equal(t, int64(0), got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].BaseOffset)
	require.Equal(t, int64(1), got[2].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].BaseOffset, "submitted in order: smaller offset first")
}

func TestFailureRuleClosesAfterFailedProduce(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.SetManual(true)
	c1 := h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "ok")))
	c2 := h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "fails")))
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "after")))
	h.send(fetchReq(11, 0, 0, fetchPart{topic: "a"}))
	pend := h.be.TakePending()
	require.Len(t, pend, 3)
	pend[1].Fail(kafka.ErrNotLeader)
	require.Empty(t, h.take())
	pend[2].Commit()
	pend[0].Commit()
	got := h.take()
	require.Len(t, got, 2)
	require.Equal(t, c1, got[0].corr)
	require.Equal(t, c2, got[1].corr)
	require.Equal(t, kerr.NotLeaderForPartition.Code, got[1].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
	require.True(t, h.out.Close)
	require.Contains(t, h.out.Reason, "produce")
	// Nothing more is read.
	h.send(kmsg.NewPtrMetadataRequest())
	require.Empty(t, h.take())
}

func TestVersionSpecificFields(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", "x", "y")
	h.be.StreamByName("a").SetStart(1)
	// Produce v5+: log_start_offset; v2+: log_append_time -1.
	h.send(produceReq(5, 1, "a", makeBatch(t, 0, -1, 1, "z")))
	// Fetch v11 fields.
	r := fetchReq(11, 0, 0, fetchPart{topic: "a", offset: 1})
	r.IsolationLevel = 1
	h.send(r)
	// ListOffsets v0 and v1.
	for _, v := range []int16{0, 1} {
		for _, ts := range []int64{-2, -1} {
			lo := kmsg.NewPtrListOffsetsRequest()
			lo.Version = v
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = "a"
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp, lp.MaxNumOffsets = ts, 5
			lt.Partitions = append(lt.Partitions, lp)
			lo.Topics = append(lo.Topics, lt)
			h.send(lo)
		}
	}
	got := h.take()
	pp := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	require.Equal(t, int64(2), pp.BaseOffset)
	require.Equal(t, int64(1), pp.LogStartOffset)
	require.Equal(t, int64(-1), pp.LogAppendTime)
	fp := onlyFetchPartition(t, got[1])
	require.Equal(t, int32(-1), fp.PreferredReadReplica)
	require.Equal(t, int64(3), fp.LastStableOffset)
	require.Equal(t, int64(1), fp.LogStartOffset)
	require.NotNil(t, fp.AbortedTransactions)
	require.Empty(t, fp.AbortedTransactions)
	l0 := got[2].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Equal(t, []int64{1}, l0.OldStyleOffsets)
	l0 = got[3].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Equal(t, []int64{3}, l0.OldStyleOffsets)
	l1 := got[4].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Equal(t, int64(1), l1.Offset)
	require.Equal(t, int64(-1), l1.Timestamp)
	l1 = got[5].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	require.Equal(t, int64(3), l1.Offset)
}

func TestInFlightBoundPausesReading(t *testing.T) {
	h := newHarness(t, kafka.Config{MaxInFlightRequests: 2})
	h.be.SetManual(true)
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "1")))
	require.False(t, h.s.Take().Paused)
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "2")))
	require.True(t, h.s.Take().Paused)
	for _, p := range h.be.TakePending() {
		p.Commit()
	}
	require.Len(t, h.take(), 2)
	require.False(t, h.out.Paused)
	require.True(t, h.out.Idle)
}

// Error answers come in the request's own version (decodeResponses decodes
// each response at its request's version and fails on any mismatch).
func TestTrapErrorAnswersInOwnVersion(t *testing.T) {
	for v := int16(0); v <= 8; v++ {
		h := newHarness(t, kafka.Config{})
		h.send(produceReq(v, -1, "nope", []byte{1}))
		got := h.take()
		require.Len(t, got, 1, "produce v%d", v)
		p := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		require.Equal(t, kerr.UnknownTopicOrPartition.Code, p.ErrorCode)
		require.Equal(t, int64(-1), p.BaseOffset)
	}
	h := newHarness(t, kafka.Config{})
	for v := int16(0); v <= 11; v++ {
		h.send(fetchReq(v, 0, 0, fetchPart{topic: "nope"}))
	}
	for v := int16(0); v <= 5; v++ {
		lo := kmsg.NewPtrListOffsetsRequest()
		lo.Version = v
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "a"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition = 7
		lt.Partitions = append(lt.Partitions, lp)
		lo.Topics = append(lo.Topics, lt)
		h.send(lo)
	}
	got := h.take()
	require.Len(t, got, 18)
	for _, g := range got[:12] {
		require.Equal(t, kerr.UnknownTopicOrPartition.Code, onlyFetchPartition(t, g).ErrorCode)
	}
	for _, g := range got[12:] {
		require.Equal(t, kerr.UnknownTopicOrPartition.Code, g.resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode)
	}
}
