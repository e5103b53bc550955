package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

// pooledBackend serves reads through kafka.PooledReader from buffers that
// are poisoned when released, and counts them.
type pooledBackend struct {
	*kafkatest.Backend
	reads, released int
}

func (b *pooledBackend) Log(stream string) (kafka.LogView, error) {
	v, err := b.Backend.Log(stream)
	if err != nil {
		return nil, err
	}
	return pooledView{v, b}, nil
}

type pooledView struct {
	kafka.LogView
	b *pooledBackend
}

type poisonBuf struct {
	b    *pooledBackend
	buf  []byte
	done bool
}

func (p *poisonBuf) Release() {
	if p.done {
		panic("released twice")
	}
	p.done = true
	for i := range p.buf {
		p.buf[i] = 0xEE
	}
	p.b.released++
}

func (v pooledView) ReadPooled(offset, hwm int64, maxBytes int) ([]batchfmt.Batch, kafka.Releaser, error) {
	bs, err := v.Read(offset, hwm, maxBytes)
	if err != nil || len(bs) == 0 {
		return bs, nil, err
	}
	p := &poisonBuf{b: v.b}
	for _, b := range bs {
		p.buf = append(p.buf, b.Data...)
	}
	out, pos := make([]batchfmt.Batch, len(bs)), 0
	for i, b := range bs {
		out[i] = b
		out[i].Data = p.buf[pos : pos+len(b.Data) : pos+len(b.Data)]
		pos += len(b.Data)
	}
	v.b.reads++
	return out, p, nil
}

func newPooledHarness(t *testing.T, vectored bool) (*harness, *pooledBackend) {
	be := &pooledBackend{Backend: kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092})}
	be.AddStream("a")
	be.AddStream("b")
	h := &harness{t: t, be: be.Backend, sent: map[int32]kmsg.Request{}}
	s, err := kafka.NewSession(kafka.Config{}, be, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	s.SetVectored(vectored)
	h.s = s
	return h, be
}

// TestVectoredFetchIsTheSameResponse: for every fetch version, a vectored
// session's pieces are the plain session's bytes; v4+ carry the stored
// batches as pieces of their own (not copied), and the pooled memory is
// released only by the driver, after the write.
func TestVectoredFetchIsTheSameResponse(t *testing.T) {
	for v := int16(0); v <= 11; v++ {
		plain, pbe := newPooledHarness(t, false)
		vec, vbe := newPooledHarness(t, true)
		for _, h := range []*harness{plain, vec} {
			h.produceOK(8, "a", vals(5, "v")...)
			h.produceOK(8, "a", vals(3, "w")...)
			h.produceOK(8, "b", vals(4, "x")...)
			h.send(fetchReq(v, 0, 0, fetchPart{topic: "a", offset: 6}, fetchPart{topic: "b"},
				fetchPart{topic: "nope"}, fetchPart{topic: "a", offset: 2}))
		}
		want := plain.s.Take()
		require.Empty(t, want.Vec)
		require.Equal(t, pbe.reads, pbe.released, "v%d: plain sessions release once copied", v)
		got := vec.s.Take()
		require.Nil(t, got.Data)
		joined := []byte{}
		for _, p := range got.Vec {
			joined = append(joined, p...)
		}
		require.Equal(t, want.Data, joined, "v%d", v)
		if v >= 4 {
			require.Greater(t, len(got.Vec), 3, "v%d: records spliced in", v)
			require.Len(t, got.Release, vbe.reads)
			require.Zero(t, vbe.released, "v%d: released only after the write", v)
		}
		for _, r := range got.Release {
			r.Release()
		}
		require.Equal(t, vbe.reads, vbe.released)
		resp := decodeResponses(t, want.Data, vec.sent)
		f := resp[len(resp)-1].resp.(*kmsg.FetchResponse)
		require.Len(t, f.Topics, 4)
		if v >= 4 {
			offs, vals := batchValues(t, f.Topics[0].Partitions[0].RecordBatches)
			require.Equal(t, []int64{5, 6, 7}, offs)
			require.Equal(t, []string{"w0", "w1", "w2"}, vals)
		}
	}
}

// TestParkedFetchReleasesItsReads: a fetch that read too little and parks
// gives back what it read; the final answer's reads are released after
// the write.
func TestParkedFetchReleasesItsReads(t *testing.T) {
	h, be := newPooledHarness(t, true)
	h.produceOK(8, "a", vals(5, "v")...)
	h.send(fetchReq(11, 1000, 1<<20, fetchPart{topic: "a"}))
	out := h.s.Take()
	require.Empty(t, out.Vec, "parked: min_bytes not there")
	require.Equal(t, 1, be.reads)
	require.Equal(t, 1, be.released, "a parked fetch holds no pooled memory")
	h.now += 2e9
	h.s.Poll(h.now)
	out = h.s.Take()
	require.NotEmpty(t, out.Vec)
	require.Len(t, out.Release, 1)
	require.Equal(t, 2, be.reads)
	require.Equal(t, 1, be.released)
}
