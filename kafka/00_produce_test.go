package kafka_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/records"
)

func TestTrapProduceBaseOffsetEveryVersion(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	next := int64(0)
	for v := int16(3); v <= 8; v++ {
		base := h.produceOK(v, "a", "x", "y", "z")
		require.Equal(t, next, base, "v%d", v)
		next += 3
	}
}

func TestTrapOffsetsPerRecord(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	two := append(makeBatch(t, 0, 0, 1, vals(5, "p")...), makeBatch(t, records.CodecGzip, 0, 1, vals(3, "q")...)...)
	h.send(produceReq(7, 1, "a", two))
	got := h.take()
	require.Equal(t, int64(0), got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].BaseOffset)
	require.Equal(t, int64(8), h.produceOK(7, "a", "r"))
	h.send(fetchReq(11, 0, 0, fetchPart{topic: "a"}))
	p := onlyFetchPartition(t, h.take()[0])
	offs, values := batchValues(t, p.RecordBatches)
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8}, offs)
	require.Equal(t, "q2", values[7])
	require.Equal(t, int64(9), p.HighWatermark)
}

func TestTrapAcksZeroNoResponse(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.send(produceReq(7, 0, "a", makeBatch(t, 0, -1, 1, "silent")))
	md := h.send(kmsg.NewPtrMetadataRequest())
	got := h.take()
	require.Len(t, got, 1)
	require.Equal(t, md, got[0].corr)
	require.Equal(t, int64(1), h.be.StreamByName("a").HighWatermark())
}

func TestAcksZeroFailureCloses(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.send(produceReq(7, 0, "nope", makeBatch(t, 0, -1, 1, "x")))
	h.send(kmsg.NewPtrMetadataRequest())
	got := h.take()
	require.Empty(t, got)
	require.True(t, h.out.Close)
}

func TestValidationFailureStopsLaterProduces(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	bad := makeBatch(t, 0, -1, 1, "x")
	bad[len(bad)-1] ^= 0xff // CRC mismatch
	c1 := h.send(produceReq(5, -1, "a", bad))
	h.send(produceReq(5, -1, "a", makeBatch(t, 0, -1, 1, "never")))
	got := h.take()
	require.Len(t, got, 1)
	require.Equal(t, c1, got[0].corr)
	require.Equal(t, kerr.CorruptMessage.Code, got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
	require.True(t, h.out.Close)
	require.Equal(t, int64(0), h.be.StreamByName("a").EndOffset(), "the later produce was never submitted")
}

func TestProduceTimeout(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.SetManual(true)
	r := produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "slow"))
	r.TimeoutMillis = 1500
	h.send(r)
	require.Empty(t, h.take())
	require.Equal(t, int64(1500*time.Millisecond), h.out.Deadline)
	h.now = int64(1499 * time.Millisecond)
	h.s.Poll(h.now)
	require.Empty(t, h.take())
	h.now = int64(1500 * time.Millisecond)
	h.s.Poll(h.now)
	got := h.take()
	require.Len(t, got, 1)
	p := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	require.Equal(t, kerr.RequestTimedOut.Code, p.ErrorCode)
	require.Equal(t, int64(-1), p.BaseOffset)
	require.True(t, h.out.Close)
	h.be.TakePending()[0].Commit() // late completion is ignored
	require.Empty(t, h.take())
}

func TestProduceErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int16
	}{
		// The server's translation of raftnode's errors into these is
		// tested in server (TestKafkaErrorTranslation).
		{kafka.ErrNotLeader, kerr.NotLeaderForPartition.Code},
		{fmt.Errorf("%w: stopped", kafka.ErrNotLeader), kerr.NotLeaderForPartition.Code},
		{kafka.ErrBackpressure, kerr.NotEnoughReplicas.Code},
		{kafka.ErrNoLeader, kerr.LeaderNotAvailable.Code},
		{kafka.ErrTimeout, kerr.RequestTimedOut.Code},
		{kafka.ErrUnknownStream, kerr.UnknownTopicOrPartition.Code},
		{kafka.ErrTooLarge, kerr.MessageTooLarge.Code},
		{kafka.ErrDiskFull, kerr.KafkaStorageError.Code},
	} {
		h := newHarness(t, kafka.Config{})
		h.be.FailProduces(c.err)
		h.send(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "x")))
		got := h.take()
		p := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		require.Equal(t, c.code, p.ErrorCode, "%v", c.err)
		require.NotNil(t, p.ErrorMessage)
	}
}

func TestProduceValidationCodes(t *testing.T) {
	big := makeBatch(t, 0, -1, 1, string(make([]byte, 2000)))
	zstd := makeBatch(t, records.CodecZstd, -1, 1, "z")
	for _, c := range []struct {
		name  string
		v     int16
		acks  int16
		topic string
		recs  []byte
		code  int16
	}{
		{"too large", 8, -1, "a", big, kerr.MessageTooLarge.Code},
		{"zstd on v6", 6, -1, "a", zstd, kerr.UnsupportedCompressionType.Code},
		{"unknown topic", 8, -1, "nope", zstd, kerr.UnknownTopicOrPartition.Code},
		{"bad acks", 8, 2, "a", zstd, kerr.InvalidRequiredAcks.Code},
		{"legacy magic on v3", 3, -1, "a", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, kerr.CorruptMessage.Code},
	} {
		h := newHarness(t, kafka.Config{MaxMessageBytes: 1024})
		h.send(produceReq(c.v, c.acks, c.topic, c.recs))
		got := h.take()
		require.Len(t, got, 1, c.name)
		require.Equal(t, c.code, got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode, c.name)
	}
	// zstd on v7 is fine.
	h := newHarness(t, kafka.Config{})
	require.Equal(t, int64(0), h.produceOK(7, "a", "z"))
	_ = zstd
}

func TestTrapPartitionLeaderEpochNotValidated(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	for i, epoch := range []int32{0, -1, 12345} {
		h.send(produceReq(8, -1, "a", makeBatch(t, 0, epoch, 1, "e")))
		got := h.take()
		p := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		require.Equal(t, int16(0), p.ErrorCode)
		require.Equal(t, int64(i), p.BaseOffset)
	}
}

// Legacy produce (MessageSet v1, Produce v2) is stored as v2 batches and
// read back by every fetch version.
func TestLegacyProduceRoundTrip(t *testing.T) {
	h := newHarness(t, kafka.Config{Profile: kafka.ProfileKafka0102})
	var ms []byte
	for i, v := range []string{"m0", "m1", "m2"} {
		m := kmsg.MessageV1{Offset: int64(i), Magic: 1, Timestamp: 1000, Value: []byte(v)}
		m.MessageSize = int32(len(m.AppendTo(nil)) - 12)
		b := m.AppendTo(nil)
		binary.BigEndian.PutUint32(b[12:], crc32IEEE(b[16:]))
		ms = append(ms, b...)
	}
	h.send(produceReq(2, 1, "a", ms))
	got := h.take()
	require.Equal(t, int16(0), got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
	h.send(fetchReq(3, 0, 0, fetchPart{topic: "a", offset: 1}))
	p := onlyFetchPartition(t, h.take()[0])
	require.Equal(t, int64(3), p.HighWatermark)
	require.NotEmpty(t, p.RecordBatches)
	require.Equal(t, int8(1), int8(p.RecordBatches[16]))
}

// A connection's produces go out in one chain, another connection's in
// another, and closing the session ends its chain, once: the backend
// refuses what follows a failed produce of a chain (raftnode.Chain), which
// the session submitted before it learned of the failure.
func TestProduceChainPerConnection(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.send(produceReq(5, -1, "a", makeBatch(t, 0, -1, 1, "one")))
	h.send(produceReq(5, -1, "b", makeBatch(t, 0, -1, 1, "two")))
	require.Len(t, h.take(), 2)
	other := newHarnessOn(t, h.be)
	other.send(produceReq(5, -1, "a", makeBatch(t, 0, -1, 1, "three")))
	require.Len(t, other.take(), 1)

	produced, ended := h.be.Chains()
	require.Len(t, produced, 3)
	require.NotZero(t, produced[0])
	require.Equal(t, produced[0], produced[1], "one connection, one chain")
	require.NotEqual(t, produced[0], produced[2], "another connection, another chain")
	require.Empty(t, ended)
	h.s.Close()
	h.s.Close()
	_, ended = h.be.Chains()
	require.Equal(t, []uint64{produced[0]}, ended, "ended once, when the connection closed")
}
