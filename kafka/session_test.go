package kafka_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
	"github.com/vdl-project/vdl/kafka/records"
	"github.com/vdl-project/vdl/raftnode"
)

var groupKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16}

func apiVersions(t *testing.T, profile string, v int16) *kmsg.ApiVersionsResponse {
	h := newHarness(t, kafka.Config{Profile: profile})
	r := kmsg.NewPtrApiVersionsRequest()
	r.Version = v
	r.ClientSoftwareName, r.ClientSoftwareVersion = "test", "1.0"
	h.send(r)
	got := h.take()
	require.Len(t, got, 1)
	return got[0].resp.(*kmsg.ApiVersionsResponse)
}

func TestProfilesAreCoherent(t *testing.T) {
	old := apiVersions(t, kafka.ProfileKafka0102, 0)
	require.Equal(t, int16(0), old.ErrorCode)
	vs := kversion.FromApiVersionsResponse(old)
	// Group keys included: only inter-broker keys, SaslHandshake and the
	// topic admin keys are skipped.
	require.Equal(t, "v0.10.2", vs.VersionGuess(kversion.SkipKeys(4, 5, 6, 7, 17, 19, 20)))
	for _, k := range groupKeys {
		_, ok := vs.LookupMaxKeyVersion(k)
		require.True(t, ok, "key %d", k)
	}

	modern := apiVersions(t, kafka.ProfileModern, 3)
	mv := kversion.FromApiVersionsResponse(modern)
	var absent []int16
	for k := int16(0); k < 200; k++ {
		if _, ok := mv.LookupMaxKeyVersion(k); !ok {
			absent = append(absent, k)
		}
	}
	// Group keys whose next version brings static membership (KIP-345,
	// group.instance.id), which VDL does not implement, stop just before it;
	// the other group keys are at Kafka 2.4's versions.
	staticCapped := map[int16]int16{11: 4, 14: 2, 12: 2, 13: 2, 8: 6, 15: 3}
	skip := absent
	for k := range staticCapped {
		skip = append(skip, k)
	}
	// With OffsetFetch at 6 (2.5 brought 7) the guess is exactly 2.4.
	require.Equal(t, "v2.4", mv.VersionGuess(kversion.SkipKeys(skip...)))
	for _, k := range groupKeys {
		_, ok := mv.LookupMaxKeyVersion(k)
		require.True(t, ok, "key %d", k)
	}
	// Every advertised version of the served keys is what Kafka 2.4 has,
	// except the static-membership cap, which is exactly one below the
	// version that introduced group.instance.id.
	for _, k := range modern.ApiKeys {
		want, ok := kversion.V2_4_0().LookupMaxKeyVersion(k.ApiKey)
		require.True(t, ok)
		if c, capped := staticCapped[k.ApiKey]; capped {
			require.Equal(t, c, k.MaxVersion, "key %d", k.ApiKey)
			require.Less(t, c, want, "key %d", k.ApiKey)
		} else {
			require.Equal(t, want, k.MaxVersion, "key %d", k.ApiKey)
		}
		require.Equal(t, int16(0), k.MinVersion)
	}
	static := map[int16]int16{11: 5, 14: 3, 12: 3, 13: 3, 8: 7, 15: 4}
	for k, v := range static {
		require.Equal(t, staticCapped[k]+1, v, "key %d", k)
	}
}

func TestTrapApiVersionsV3ResponseHeaderV0(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	r := kmsg.NewPtrApiVersionsRequest()
	r.Version = 3
	r.ClientSoftwareName, r.ClientSoftwareVersion = "sarama", "1.61"
	h.send(r)
	data := h.s.Take().Data
	// length, correlation id, then the body's error code at once: no
	// tagged-field byte in the response header.
	require.Equal(t, int32(1), int32(binary.BigEndian.Uint32(data[4:])))
	require.Equal(t, []byte{0, 0}, data[8:10])
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	require.NoError(t, resp.ReadFrom(data[8:]))
	require.NotEmpty(t, resp.ApiKeys)
}

func TestTrapApiVersionsDowngradeSameConnection(t *testing.T) {
	for _, profile := range []string{kafka.ProfileKafka0102, kafka.ProfileModern} {
		h := newHarness(t, kafka.Config{Profile: profile})
		// A version we do not serve, with a body we cannot parse.
		frame := []byte{0, 18, 0, 9, 0, 0, 0, 7, 0xff, 0xff, 0, 0xde, 0xad}
		h.s.Receive(0, frame)
		out := h.s.Take()
		require.False(t, out.Close)
		require.Equal(t, int32(7), int32(binary.BigEndian.Uint32(out.Data[4:])))
		resp := kmsg.NewPtrApiVersionsResponse() // v0 body
		require.NoError(t, resp.ReadFrom(out.Data[8:]))
		require.Equal(t, kerr.UnsupportedVersion.Code, resp.ErrorCode)
		found := false
		for _, k := range resp.ApiKeys {
			found = found || k.ApiKey == 18
		}
		require.True(t, found, "the error body lists ApiVersions' own range")
		// The client steps down on the same connection.
		r := kmsg.NewPtrApiVersionsRequest()
		h.send(r)
		got := h.take()
		require.Len(t, got, 1)
		require.Equal(t, int16(0), got[0].resp.(*kmsg.ApiVersionsResponse).ErrorCode)
		require.False(t, h.out.Close)
	}
}

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
			require.Equal(t, int32(-1), p.LeaderEpoch)
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
	pend[1].Fail(raftnode.ErrNotLeader)
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
		{raftnode.ErrNotLeader, kerr.NotLeaderForPartition.Code},
		{raftnode.ErrBackpressure, kerr.NotEnoughReplicas.Code},
		{kafka.ErrBackpressure, kerr.NotEnoughReplicas.Code},
		{kafka.ErrNoLeader, kerr.LeaderNotAvailable.Code},
		{kafka.ErrTimeout, kerr.RequestTimedOut.Code},
		{raftnode.ErrStopped, kerr.NotLeaderForPartition.Code},
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

func newHarnessOn(t *testing.T, be *kafkatest.Backend) *harness {
	h := &harness{t: t, be: be, sent: map[int32]kmsg.Request{}}
	s, err := kafka.NewSession(kafka.Config{}, be, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	return h
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
		require.Equal(t, int32(-1), p.LeaderEpoch)
	}
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
