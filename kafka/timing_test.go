package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

type nopObserver struct{}

func (nopObserver) RequestDone(*kafka.RequestTiming) {}
func (nopObserver) Connections(string, int)          {}

// The session stamps a request's stages from the now of the calls that
// took, handled and finished it: no clock inside.
func TestRequestTimingStages(t *testing.T) {
	h := newHarness(t, kafka.Config{Observer: nopObserver{}})
	h.be.SetManual(true)

	// Answered by its handler: no remote stage.
	h.s.ReceiveRead(10, 4, encodeRequest(kmsg.NewPtrMetadataRequest(), 1))
	h.s.Handled(15)
	out := h.s.Take()
	require.Equal(t, []kafka.RequestTiming{{Key: 3, Read: 4, Dequeued: 10, Local: 15, Completed: 15}}, out.Timings)

	// A produce waits for its commit (remote), and a metadata request
	// behind it waits for the produce's response (response queue).
	h.s.ReceiveRead(20, 20, encodeRequest(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "x")), 2))
	h.s.Handled(22)
	h.s.ReceiveRead(25, 24, encodeRequest(kmsg.NewPtrMetadataRequest(), 3))
	h.s.Handled(26)
	require.Empty(t, h.s.Take().Timings, "nothing released before the produce commits")
	h.be.TakePending()[0].Commit()
	h.now = 40
	h.deliver()
	out = h.s.Take()
	require.Equal(t, []kafka.RequestTiming{
		{Key: 0, Read: 20, Dequeued: 20, Local: 22, Completed: 40},
		{Key: 3, Read: 24, Dequeued: 25, Local: 26, Completed: 26},
	}, out.Timings)
	tm := out.Timings[1]
	tm.Taken, tm.Sent = 41, 45
	require.Equal(t, int64(15), tm.ResponseQueue(), "waited behind the produce")
	require.Equal(t, tm.Total(), tm.Queue()+tm.LocalTime()+tm.Remote()+tm.ResponseQueue()+tm.Send())
}

// Without an observer nothing is collected.
func TestRequestTimingsOffWithoutObserver(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.send(kmsg.NewPtrMetadataRequest())
	require.Empty(t, h.s.Take().Timings)
}
