package transport

import (
	"bufio"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A message queued for a peer's data dir while the stream is not up is not
// written on a connection to a process that presents another data dir: the
// peer restarted on an empty disk meanwhile, and what was decided for the old
// one (a heartbeat committing what the old disk acknowledged) is not for it.
// The campaign dc3_replace: a leader's queue to a crash-looping follower held
// heartbeats across the follower's wipe, and the first connection to the
// wiped process delivered one committing index 6172 to an empty log (raft
// panics: "tocommit(6172) is out of range [lastIndex(0)]").
func TestQueuedMessageNotWrittenToAnotherDataDir(t *testing.T) {
	checkGoroutines(t)
	la, lb := listen(t), listen(t) // lb: node 2, played by hand
	book := map[uint64]string{1: la.Addr().String(), 2: lb.Addr().String()}
	a := startNode(t, 1, la, book, func(c *Config) { c.DirID = 11 })
	t.Cleanup(func() { _ = lb.Close() })

	// Node 1 dials node 2 at once; hold the handshake's answer, so that what
	// node 1 sends meanwhile waits in its queue.
	c, err := lb.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitFor))
	hs, err := readHandshake(c)
	require.NoError(t, err)
	require.Equal(t, uint64(1), hs.From)

	hb := func(index uint64) *raftpb.Message {
		m := msg(raftpb.MsgHeartbeat, 1, 2, 0, nil)
		m.Commit = proto.Uint64(index)
		return m
	}
	a.SendTo(1, hb(6172), 22) // decided for node 2's old data dir
	a.SendTo(1, hb(1), 0)     // for any
	a.SendTo(1, hb(2), 99)    // for the new one
	require.Eventually(t, func() bool { return a.Stats()[2].QueuedBytes > 0 }, waitFor, time.Millisecond)

	// Node 2 answers: it restarted on an empty disk, data dir 99.
	_, err = c.Write(handshake{Version: protocolVersion, ClusterID: testCluster, From: 2, To: 1, MaxFrame: 1 << 20, DirID: 99}.marshal())
	require.NoError(t, err)
	a.SendTo(1, hb(3), 99)

	fr := frameReader{r: bufio.NewReader(c), maxFrame: 1 << 20}
	var got []uint64
	for len(got) == 0 || got[len(got)-1] != 3 {
		_, _, payload, err := fr.next()
		require.NoError(t, err, "received %v", got)
		m := new(raftpb.Message)
		require.NoError(t, proto.Unmarshal(payload, m))
		got = append(got, m.GetCommit())
	}
	require.Equal(t, []uint64{1, 2, 3}, got, "the heartbeat meant for data dir 22 went to data dir 99")
	st := a.Stats()[2]
	require.Equal(t, uint64(1), st.DroppedStale)
	require.True(t, st.Connected)
	require.Equal(t, uint64(99), st.Dir, "the data dir presented at the stream's handshake")
	// Reported from the sender's goroutine, which may not have got there
	// when the frames after it arrive.
	require.Eventually(t, func() bool { return a.un.called(1, 2) }, waitFor, time.Millisecond, "the dropped message is reported unreachable")
}
