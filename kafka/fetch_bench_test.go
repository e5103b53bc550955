package kafka_test

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

// recordingBackend remembers the stored slices the last fetch read, to
// tell the output's pieces that alias them from copies.
type recordingBackend struct {
	*kafkatest.Backend
	read []batchfmt.Batch
}

func (b *recordingBackend) Log(stream string) (kafka.LogView, error) {
	v, err := b.Backend.Log(stream)
	if err != nil {
		return nil, err
	}
	return recordingView{v, b}, nil
}

type recordingView struct {
	kafka.LogView
	b *recordingBackend
}

func (v recordingView) Read(offset, hwm int64, maxBytes int) ([]batchfmt.Batch, error) {
	bs, err := v.LogView.Read(offset, hwm, maxBytes)
	v.b.read = append(v.b.read[:0], bs...)
	return bs, err
}

// aliases reports whether p lies inside one of the stored slices read.
func (b *recordingBackend) aliases(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, x := range b.read {
		xlo := uintptr(unsafe.Pointer(unsafe.SliceData(x.Data)))
		if lo >= xlo && lo+uintptr(len(p)) <= xlo+uintptr(len(x.Data)) {
			return true
		}
	}
	return false
}

// BenchmarkFetchPath: 1 MiB Fetch v11 responses (16 KiB stored batches of
// 1 KiB values) through a session, as the server's driver takes them:
// plain (the output copied into one slice, as before splicing) and
// vectored (the server's mode). Regression metrics: allocs/op and B/op
// (no buffer per fetch proportional to its bytes) and copied-B/fetch, the
// bytes of the output that are copies rather than the stored slices
// themselves (only the response's framing when vectored).
func BenchmarkFetchPath(b *testing.B) {
	for _, vectored := range []bool{false, true} {
		name := "plain"
		if vectored {
			name = "vectored"
		}
		b.Run(name, func(b *testing.B) {
			be := &recordingBackend{Backend: kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092})}
			be.AddStream("a")
			h := &harness{t: &testing.T{}, be: be.Backend, sent: map[int32]kmsg.Request{}}
			s, err := kafka.NewSession(kafka.Config{}, be, func(c kafka.Completion) { h.compl = append(h.compl, c) })
			if err != nil {
				b.Fatal(err)
			}
			h.s = s
			value := strings.Repeat("v", 1000)
			for range 512 {
				h.produceOK(8, "a", vals(16, value)...)
			}
			s.SetVectored(vectored)
			end := be.StreamByName("a").HighWatermark()
			req := fetchReq(11, 0, 0, fetchPart{topic: "a"})
			off, total, copied := int64(0), 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req.Topics[0].Partitions[0].FetchOffset = off
				s.Receive(0, encodeRequest(req, 1))
				out := s.Take()
				copied += len(out.Data)
				total += len(out.Data)
				for _, p := range out.Vec {
					total += len(p)
					if !be.aliases(p) {
						copied += len(p)
					}
				}
				for _, r := range out.Release {
					r.Release()
				}
				off = be.read[len(be.read)-1].NextOffset
				if off >= end {
					off = 0
				}
			}
			b.ReportMetric(float64(copied)/float64(b.N), "copied-B/fetch")
			b.ReportMetric(float64(total)/float64(b.N), "B/fetch")
			b.ReportMetric(float64(total)/(1<<20)/b.Elapsed().Seconds(), "MB/s")
		})
	}
}
