package memcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// A heartbeat committing past a replica's log was decided for a log the
// server no longer has — the group removed and hosted again with the same
// data dir, the message held in the sender's transport queue across both
// (simulator seed 6800). raft stopped the server on it; it is dropped, and
// the replica goes on following its leader.
func TestHeartbeatPastTheLogIsDropped(t *testing.T) {
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{1}, nil)
	l := waitLeader(t, c, 1)
	f := c.Node(otherNode(c, l.ID))
	st, _ := l.Raft.Status(1)
	require.NotPanics(t, func() {
		f.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(l.ID), To: new(f.ID),
			Term: new(st.Term), Commit: new(st.Commit + 50)})
		f.Raft.Flush()
	})
	require.NoError(t, f.Raft.Err())
	produce(t, c, 1, 3)
	fs, _ := f.Raft.Status(1)
	require.Equal(t, l.ID, fs.Leader)
}
