package kafka_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
	"github.com/vdl-project/vdl/kafka/records"
)

// makeBatch builds one RecordBatch v2 with the given values (keys nil).
func makeBatch(t testing.TB, codec int8, epoch int32, ts int64, values ...string) []byte {
	t.Helper()
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v), TimestampDelta64: int64(i)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	if codec != records.CodecNone {
		z, err := records.Compress(codec, recs)
		require.NoError(t, err)
		recs = z
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: epoch, Magic: 2, Attributes: int16(codec),
		LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: ts, MaxTimestamp: ts + int64(len(values)-1),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(values)), Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// batchValues decodes the values of every whole v2 batch in b, with offsets.
func batchValues(t testing.TB, b []byte) (offs []int64, vals []string) {
	t.Helper()
	for len(b) >= 61 {
		var rb kmsg.RecordBatch
		n := int(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		if n > len(b) {
			break
		}
		require.NoError(t, rb.ReadFrom(b[:n]))
		data, err := records.Decompress(int8(rb.Attributes&7), rb.Records, 1<<26)
		require.NoError(t, err)
		for i := int32(0); i < rb.NumRecords; i++ {
			var r kmsg.Record
			l, m := binary.Varint(data)
			require.Positive(t, m)
			require.NoError(t, r.ReadFrom(data[:m+int(l)]))
			offs = append(offs, rb.FirstOffset+int64(r.OffsetDelta))
			vals = append(vals, string(r.Value))
			data = data[m+int(l):]
		}
		b = b[n:]
	}
	return offs, vals
}

// encodeRequest builds a request frame (without the length prefix).
func encodeRequest(req kmsg.Request, corr int32) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	id := "test"
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// harness drives one Session by hand.
type harness struct {
	t     *testing.T
	be    *kafkatest.Backend
	s     *kafka.Session
	now   int64
	compl []kafka.Completion
	sent  map[int32]kmsg.Request
	corr  int32
	out   kafka.Output
}

func newHarness(t *testing.T, cfg kafka.Config) *harness {
	be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092})
	be.AddStream("a")
	be.AddStream("b")
	h := &harness{t: t, be: be, sent: map[int32]kmsg.Request{}}
	s, err := kafka.NewSession(cfg, be, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	return h
}

// send encodes req at its version, feeds it and returns its correlation id.
func (h *harness) send(req kmsg.Request) int32 {
	h.corr++
	h.sent[h.corr] = req
	h.s.Receive(h.now, encodeRequest(req, h.corr))
	return h.corr
}

// deliver feeds queued produce completions to the session.
func (h *harness) deliver() {
	for len(h.compl) > 0 {
		c := h.compl[0]
		h.compl = h.compl[1:]
		h.s.ProduceDone(h.now, c)
	}
}

type gotResp struct {
	corr int32
	resp kmsg.Response
}

// take returns the responses the session released, decoded.
func (h *harness) take() []gotResp {
	h.deliver()
	h.out = h.s.Take()
	data := h.out.Data
	for _, p := range h.out.Vec { // a vectored session
		data = append(data, p...)
	}
	for _, r := range h.out.Release {
		r.Release()
	}
	return decodeResponses(h.t, data, h.sent)
}

func decodeResponses(t testing.TB, data []byte, sent map[int32]kmsg.Request) []gotResp {
	var got []gotResp
	for len(data) > 0 {
		require.GreaterOrEqual(t, len(data), 8)
		n := int(binary.BigEndian.Uint32(data))
		frame := data[4 : 4+n]
		data = data[4+n:]
		corr := int32(binary.BigEndian.Uint32(frame))
		req, ok := sent[corr]
		require.True(t, ok, "response for unknown correlation id %d", corr)
		resp := req.ResponseKind()
		body := frame[4:]
		if resp.IsFlexible() && req.Key() != 18 {
			require.Equal(t, byte(0), body[0])
			body = body[1:]
		}
		require.NoError(t, resp.ReadFrom(body), "decode %s v%d", kmsg.NameForKey(req.Key()), req.GetVersion())
		got = append(got, gotResp{corr, resp})
	}
	return got
}

func produceReq(v, acks int16, topic string, recs []byte) *kmsg.ProduceRequest {
	r := kmsg.NewPtrProduceRequest()
	r.Version, r.Acks, r.TimeoutMillis = v, acks, 5000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = topic
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = recs
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

func fetchReq(v int16, maxWait, minBytes int32, parts ...fetchPart) *kmsg.FetchRequest {
	r := kmsg.NewPtrFetchRequest()
	r.Version, r.MaxWaitMillis, r.MinBytes, r.MaxBytes = v, maxWait, minBytes, 50<<20
	for _, fp := range parts {
		t := kmsg.NewFetchRequestTopic()
		t.Topic = fp.topic
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.FetchOffset, p.PartitionMaxBytes = fp.partition, fp.offset, fp.maxBytes
		if p.PartitionMaxBytes == 0 {
			p.PartitionMaxBytes = 1 << 20
		}
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
	}
	return r
}

type fetchPart struct {
	topic     string
	partition int32
	offset    int64
	maxBytes  int32
}

func (h *harness) produceOK(v int16, topic string, values ...string) int64 {
	h.t.Helper()
	corr := h.send(produceReq(v, -1, topic, makeBatch(h.t, 0, -1, 1000, values...)))
	got := h.take()
	require.Len(h.t, got, 1)
	require.Equal(h.t, corr, got[0].corr)
	p := got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	require.Equal(h.t, int16(0), p.ErrorCode, "produce error")
	return p.BaseOffset
}

func onlyFetchPartition(t testing.TB, r gotResp) kmsg.FetchResponseTopicPartition {
	f := r.resp.(*kmsg.FetchResponse)
	require.Len(t, f.Topics, 1)
	require.Len(t, f.Topics[0].Partitions, 1)
	return f.Topics[0].Partitions[0]
}

func vals(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func newHarnessOn(t *testing.T, be *kafkatest.Backend) *harness {
	h := &harness{t: t, be: be, sent: map[int32]kmsg.Request{}}
	s, err := kafka.NewSession(kafka.Config{}, be, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	return h
}
