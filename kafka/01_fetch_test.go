package kafka_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/records"
)

func TestTrapFetchWholeBatchContainingOffset(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", vals(5, "v")...)
	h.produceOK(8, "a", vals(5, "w")...)
	h.send(fetchReq(11, 0, 0, fetchPart{topic: "a", offset: 7}))
	p := onlyFetchPartition(t, h.take()[0])
	offs, _ := batchValues(t, p.RecordBatches)
	require.Equal(t, []int64{5, 6, 7, 8, 9}, offs, "the batch containing 7, from its start")
}

func TestTrapFetchAtLeastOneBatch(t *testing.T) {
	for _, v := range []int16{3, 4, 11} {
		h := newHarness(t, kafka.Config{})
		h.produceOK(8, "a", vals(50, "long-value-")...)
		h.produceOK(8, "a", "next")
		r := fetchReq(v, 0, 0, fetchPart{topic: "a", maxBytes: 10})
		r.MaxBytes = 10
		h.send(r)
		p := onlyFetchPartition(t, h.take()[0])
		require.Equal(t, int16(0), p.ErrorCode)
		require.Greater(t, len(p.RecordBatches), 10, "v%d: one whole batch beyond max_bytes", v)
		if v >= 4 {
			offs, _ := batchValues(t, p.RecordBatches)
			require.Len(t, offs, 50, "only the first batch")
		}
	}
}

func TestFetchResponseMaxBytesAcrossPartitions(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", vals(20, "aaaaaaaaaa")...)
	h.produceOK(8, "b", vals(20, "bbbbbbbbbb")...)
	r := fetchReq(11, 0, 0, fetchPart{topic: "a"}, fetchPart{topic: "b"})
	r.MaxBytes = 100
	h.send(r)
	f := h.take()[0].resp.(*kmsg.FetchResponse)
	require.NotEmpty(t, f.Topics[0].Partitions[0].RecordBatches, "first partition: at least one batch")
	require.Empty(t, f.Topics[1].Partitions[0].RecordBatches, "budget spent")
	require.Equal(t, int64(20), f.Topics[1].Partitions[0].HighWatermark)
}

func TestTrapFetchMaxWaitAlwaysAnswers(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", "x")
	h.send(fetchReq(11, 500, 1, fetchPart{topic: "a", offset: 1}))
	require.Empty(t, h.take())
	require.Equal(t, int64(500*time.Millisecond), h.out.Deadline)
	require.Len(t, h.out.Wait, 1)
	h.now = int64(499 * time.Millisecond)
	h.s.Poll(h.now)
	require.Empty(t, h.take())
	h.now = int64(500 * time.Millisecond)
	h.s.Poll(h.now)
	got := h.take()
	require.Len(t, got, 1)
	p := onlyFetchPartition(t, got[0])
	require.Equal(t, int16(0), p.ErrorCode)
	require.Empty(t, p.RecordBatches)
	require.Equal(t, int64(1), p.HighWatermark)
}

func TestFetchLongPollWakesOnCommit(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.SetManual(true)
	h.send(fetchReq(11, 10000, 1, fetchPart{topic: "a"}))
	require.Empty(t, h.take())
	wait := h.out.Wait
	pc := h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "hello")))
	require.Empty(t, h.take(), "the produce waits behind the parked fetch")
	h.be.TakePending()[0].Commit()
	select {
	case <-wait[0]:
	default:
		t.Fatal("the change channel did not fire")
	}
	h.now = int64(time.Millisecond)
	h.s.Poll(h.now)
	got := h.take()
	require.Len(t, got, 2)
	_, values := batchValues(t, onlyFetchPartition(t, got[0]).RecordBatches)
	require.Equal(t, []string{"hello"}, values)
	require.Equal(t, pc, got[1].corr)
}

func TestTrapHighWatermarkIsCommitted(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.SetManual(true)
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "uncommitted")))
	pend := h.be.TakePending()
	h2 := newHarnessOn(t, h.be)
	h2.send(fetchReq(11, 0, 0, fetchPart{topic: "a"}))
	h2.send(fetchReq(11, 0, 0, fetchPart{topic: "a", offset: 1}))
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 5
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "a"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	h2.send(lo)
	got := h2.take()
	require.Len(t, got, 3)
	p0 := onlyFetchPartition(t, got[0])
	require.Equal(t, int16(0), p0.ErrorCode, "fetch at the HWM: empty, no error")
	require.Empty(t, p0.RecordBatches)
	require.Equal(t, int64(0), p0.HighWatermark)
	require.Equal(t, kerr.OffsetOutOfRange.Code, onlyFetchPartition(t, got[1]).ErrorCode)
	require.Equal(t, int64(0), got[2].resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset)
	pend[0].Commit()
}

func TestFetchOutOfRangeBelowStart(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", vals(4, "x")...)
	h.be.StreamByName("a").SetStart(2)
	h.send(fetchReq(5, 0, 0, fetchPart{topic: "a", offset: 1}))
	p := onlyFetchPartition(t, h.take()[0])
	require.Equal(t, kerr.OffsetOutOfRange.Code, p.ErrorCode)
	require.Equal(t, int64(2), p.LogStartOffset)
	require.Equal(t, int64(4), p.HighWatermark)
}

func TestFetchPartialResults(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", "x")
	h.send(fetchReq(11, 5000, 1000000, fetchPart{topic: "a"}, fetchPart{topic: "nope"}, fetchPart{topic: "a", partition: 3}))
	got := h.take()
	require.Len(t, got, 1, "an error answers at once")
	f := got[0].resp.(*kmsg.FetchResponse)
	require.Equal(t, int16(0), f.Topics[0].Partitions[0].ErrorCode)
	require.NotEmpty(t, f.Topics[0].Partitions[0].RecordBatches)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, f.Topics[1].Partitions[0].ErrorCode)
	require.Equal(t, int64(-1), f.Topics[1].Partitions[0].HighWatermark)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, f.Topics[2].Partitions[0].ErrorCode)
}

func TestFetchNotLeader(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.StreamByName("a").SetLeader(2)
	h.be.StreamByName("b").SetLeader(-1)
	h.send(fetchReq(11, 0, 0, fetchPart{topic: "a"}, fetchPart{topic: "b"}))
	h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "x")))
	got := h.take()
	f := got[0].resp.(*kmsg.FetchResponse)
	require.Equal(t, kerr.NotLeaderForPartition.Code, f.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, kerr.LeaderNotAvailable.Code, f.Topics[1].Partitions[0].ErrorCode)
	require.Equal(t, kerr.NotLeaderForPartition.Code, got[1].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
}

func TestFetchZstdByVersion(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", "plain")
	h.send(produceReq(7, -1, "a", makeBatch(t, records.CodecZstd, -1, 1, "z1", "z2")))
	h.take()
	h.send(fetchReq(9, 0, 0, fetchPart{topic: "a", offset: 1}))
	h.send(fetchReq(9, 0, 0, fetchPart{topic: "a", offset: 0}))
	h.send(fetchReq(10, 0, 0, fetchPart{topic: "a", offset: 1}))
	h.send(fetchReq(3, 0, 0, fetchPart{topic: "a", offset: 0}))
	got := h.take()
	require.Equal(t, kerr.UnsupportedCompressionType.Code, onlyFetchPartition(t, got[0]).ErrorCode)
	p1 := onlyFetchPartition(t, got[1])
	require.Equal(t, int16(0), p1.ErrorCode)
	_, v1 := batchValues(t, p1.RecordBatches)
	require.Equal(t, []string{"plain"}, v1, "cut before the zstd batch")
	_, v2 := batchValues(t, onlyFetchPartition(t, got[2]).RecordBatches)
	require.Equal(t, []string{"z1", "z2"}, v2)
	ms := onlyFetchPartition(t, got[3]).RecordBatches
	require.Equal(t, int8(1), int8(ms[16]), "v3 gets a magic-1 message set")
	var msgs []string
	for len(ms) > 0 {
		var m kmsg.MessageV1
		n := int(binary.BigEndian.Uint32(ms[8:])) + 12
		require.NoError(t, m.ReadFrom(ms[:n]))
		require.Equal(t, int8(0), m.Attributes&7, "zstd down-converted uncompressed")
		msgs = append(msgs, string(m.Value))
		ms = ms[n:]
	}
	require.Equal(t, []string{"plain", "z1", "z2"}, msgs)
}

func TestFetchSessionsAreNotCreated(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	r := fetchReq(7, 0, 0, fetchPart{topic: "a"})
	r.SessionID, r.SessionEpoch = 0, 0
	h.send(r)
	r2 := fetchReq(7, 0, 0, fetchPart{topic: "a"})
	r2.SessionID, r2.SessionEpoch = 42, 1
	h.send(r2)
	r3 := fetchReq(11, 0, 0, fetchPart{topic: "a"})
	r3.SessionID, r3.SessionEpoch = 0, 5
	h.send(r3)
	got := h.take()
	f0 := got[0].resp.(*kmsg.FetchResponse)
	require.Equal(t, int16(0), f0.ErrorCode)
	require.Equal(t, int32(0), f0.SessionID)
	require.Equal(t, kerr.FetchSessionIDNotFound.Code, got[1].resp.(*kmsg.FetchResponse).ErrorCode)
	require.Equal(t, kerr.InvalidFetchSessionEpoch.Code, got[2].resp.(*kmsg.FetchResponse).ErrorCode)
}
