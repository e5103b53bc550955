package raftnode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// clockRecorder keeps what an appendClock observed.
type clockRecorder struct {
	trips   map[uint64][]time.Duration // by follower
	durable []time.Duration
}

func newRecordedClock() (*appendClock, *clockRecorder) {
	r := &clockRecorder{trips: map[uint64][]time.Duration{}}
	c := newAppendClock(func(peer uint64, d time.Duration) { r.trips[peer] = append(r.trips[peer], d) },
		func(d time.Duration) { r.durable = append(r.durable, d) })
	return c, r
}

func appendMsg(from, to, first, last uint64) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(from), To: new(to)}
	for i := first; i <= last; i++ {
		m.Entries = append(m.Entries, &raftpb.Entry{Index: new(i)})
	}
	return m
}

func answer(from, to, index uint64, reject bool) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(from), To: new(to), Index: new(index), Reject: new(reject)}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestAppendRoundTripPerFollower(t *testing.T) {
	c, r := newRecordedClock()
	t0 := time.Unix(1000, 0)
	c.sending(7, appendMsg(1, 2, 1, 5), t0)
	c.sending(7, appendMsg(1, 3, 1, 5), t0)
	c.sending(7, appendMsg(1, 2, 6, 8), t0.Add(ms(2)))
	c.received(7, answer(2, 1, 5, false), t0.Add(ms(3)))
	c.received(7, answer(3, 1, 5, false), t0.Add(ms(9)))
	c.received(7, answer(2, 1, 8, false), t0.Add(ms(4)))
	require.Equal(t, []time.Duration{ms(3), ms(2)}, r.trips[2])
	require.Equal(t, []time.Duration{ms(9)}, r.trips[3])
	require.Empty(t, c.sent, "every append answered: nothing kept")
}

func TestAnAnswerCoveringAppendsTimesTheLatest(t *testing.T) {
	c, r := newRecordedClock()
	t0 := time.Unix(1000, 0)
	c.sending(7, appendMsg(1, 2, 1, 5), t0)
	c.sending(7, appendMsg(1, 2, 6, 8), t0.Add(ms(5)))
	c.sending(7, appendMsg(1, 2, 9, 9), t0.Add(ms(6)))
	c.received(7, answer(2, 1, 8, false), t0.Add(ms(7)))
	require.Equal(t, []time.Duration{ms(2)}, r.trips[2], "timed from the append of 6..8, the one before dropped")
	require.Len(t, c.sent[7][2], 1, "9 still awaits its answer")
	c.received(7, answer(2, 1, 3, false), t0.Add(ms(8)))
	require.Len(t, r.trips[2], 1, "an answer below every kept append times nothing")
}

func TestAppendDurableOnAFollower(t *testing.T) {
	c, r := newRecordedClock()
	t0 := time.Unix(1000, 0)
	m := appendMsg(1, 2, 1, 5)
	require.True(t, clocked(m))
	c.received(7, m, t0)
	rejected := answer(2, 1, 0, true)
	require.False(t, clocked(rejected), "a rejection acknowledges nothing")
	require.False(t, clocked(&raftpb.Message{Type: raftpb.MsgApp.Enum()}), "an empty append (a probe) is not timed")
	require.False(t, clocked(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum()}))
	c.sending(7, answer(2, 1, 5, false), t0.Add(ms(4)))
	require.Equal(t, []time.Duration{ms(4)}, r.durable)
	require.Empty(t, c.arrived)
}

func TestAppendClockKeepsWhatItBounds(t *testing.T) {
	c, r := newRecordedClock()
	t0 := time.Unix(1000, 0)
	for i := uint64(1); i <= 3*maxTimedAppends; i++ {
		c.sending(7, appendMsg(1, 2, i, i), t0)
		c.received(8, appendMsg(3, 1, i, i), t0)
	}
	require.Len(t, c.sent[7][2], maxTimedAppends)
	require.Len(t, c.arrived[8], maxTimedAppends)

	// A leader that now follows forgets what it sent; a follower that now
	// leads forgets what arrived: no answer to them will come.
	c.received(7, appendMsg(3, 1, 500, 500), t0)
	require.NotContains(t, c.sent, uint64(7))
	c.sending(8, appendMsg(1, 3, 500, 500), t0)
	require.NotContains(t, c.arrived, uint64(8))
	c.forget(7)
	c.forget(8)
	require.Empty(t, c.sent)
	require.Empty(t, c.arrived)
	require.Empty(t, r.trips)
	require.Empty(t, r.durable)
}

type discardSender struct{}

func (discardSender) Send(uint64, *raftpb.Message) {}

// A peer may send appends for any group id (a group removed here, or a
// forged id): the clock keeps nothing for a group the Host does not host.
func TestAppendClockIgnoresGroupsNotHosted(t *testing.T) {
	h := NewHost(HostConfig{Core: Config{ID: 1}, Sender: discardSender{}, ObserveDurable: func(time.Duration) {}})
	defer h.Stop()
	for g := uint64(1); g <= 1000; g++ {
		h.Step(g, appendMsg(2, 1, 1, 1))
	}
	var kept int
	require.NoError(t, h.call(func() { kept = len(h.appends.arrived) }))
	require.Zero(t, kept)
}
