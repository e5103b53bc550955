package kafka_test

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

func seedFrames(t testing.TB) [][]byte {
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	f := fetchReq(11, 100, 1, fetchPart{topic: "a"}, fetchPart{topic: "b", offset: 3})
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 5
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "a"
	lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	lo.Topics = append(lo.Topics, lt)
	return [][]byte{
		encodeRequest(av, 1),
		encodeRequest(md, 2),
		encodeRequest(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "x", "y")), 3),
		encodeRequest(produceReq(2, 1, "a", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}), 4),
		encodeRequest(f, 5),
		encodeRequest(lo, 6),
		encodeRequest(produceReq(8, 0, "b", makeBatch(t, 0, -1, 1, "z")), 7),
	}
}

// FuzzSession feeds arbitrary frames to a Session: it must never panic, and
// its output must be whole response frames whose correlation ids follow the
// order of the requests, or a close.
func FuzzSession(f *testing.F) {
	frames := seedFrames(f)
	var all []byte
	for _, fr := range frames {
		f.Add(fr)
		all = binary.BigEndian.AppendUint16(all, uint16(len(fr)))
		all = append(all, fr...)
	}
	f.Add(all)
	f.Fuzz(func(t *testing.T, data []byte) {
		be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "h", Port: 1})
		be.AddStream("a")
		be.AddStream("b")
		var compl []kafka.Completion
		s, err := kafka.NewSession(kafka.Config{MaxFrameBytes: 1 << 16}, be, func(c kafka.Completion) { compl = append(compl, c) })
		if err != nil {
			t.Fatal(err)
		}
		// data: a single frame, or [u16 len][frame]... when it parses so.
		var in [][]byte
		for p := data; len(p) >= 2; {
			n := int(binary.BigEndian.Uint16(p))
			if n+2 > len(p) {
				in = nil
				break
			}
			in = append(in, p[2:2+n])
			p = p[2+n:]
		}
		if in == nil {
			in = [][]byte{data}
		}
		var corrs []int32
		var out []byte
		closed := false
		now := int64(0)
		for _, fr := range in {
			if len(fr) >= 8 {
				corrs = append(corrs, int32(binary.BigEndian.Uint32(fr[4:])))
			}
			s.Receive(now, fr)
			for len(compl) > 0 {
				c := compl[0]
				compl = compl[1:]
				s.ProduceDone(now, c)
			}
			o := s.Take()
			out = append(out, o.Data...)
			closed = closed || o.Close
			now += 1e9
			s.Poll(now)
		}
		for i := 0; i < 3 && !closed; i++ {
			now += 30 * 24 * 3600e9
			s.Poll(now)
			o := s.Take()
			out = append(out, o.Data...)
			closed = o.Close
		}
		// Whole frames, correlation ids in request order.
		j := 0
		for len(out) > 0 {
			if len(out) < 8 {
				t.Fatalf("partial response frame")
			}
			n := int(binary.BigEndian.Uint32(out))
			if n < 4 || n+4 > len(out) {
				t.Fatalf("bad response length %d", n)
			}
			corr := int32(binary.BigEndian.Uint32(out[4:]))
			for j < len(corrs) && corrs[j] != corr {
				j++
			}
			if j == len(corrs) {
				t.Fatalf("response %d out of order or unknown", corr)
			}
			j++
			out = out[4+n:]
		}
		if !closed && s.Pending() != 0 {
			t.Fatalf("%d requests still pending after every deadline", s.Pending())
		}
	})
}

// FuzzRequestHeader: ParseRequestHeader never panics and never returns a
// body that is not a suffix of the frame.
func FuzzRequestHeader(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Add([]byte{0, 18, 0, 3, 0, 0, 0, 1, 0, 0, 5, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, body, err := kafka.ParseRequestHeader(frame)
		if err != nil {
			return
		}
		if len(body) > len(frame)-10 || (len(body) > 0 && &body[len(body)-1] != &frame[len(frame)-1]) {
			t.Fatalf("body is not a suffix of the frame")
		}
		if h.ClientID != nil && len(*h.ClientID) > len(frame) {
			t.Fatalf("client id longer than the frame")
		}
	})
}
