package memcluster

import (
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// A leader's proposals wait in its queue while two appends are in flight.
// When its leadership goes, those still queued are refused at once (not
// the leader: not written). Kept, they went into raft once the server led
// again, in a later term, behind an earlier proposal of their connection
// that the old term had taken and a new leader overwrote: a hole in the
// connection's writes (simulator seed 2226: an idempotent producer's
// sequence 34 lost, 35-37 written).
func TestQueuedProposalsGoWithTheTerm(t *testing.T) {
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{1}, nil)
	l := waitLeader(t, c, 1)
	var ids []raftnode.ProposalID
	for i := range 5 { // no step of the cluster in between: no write finishes
		c.nextID++
		l.Raft.ProposeRecords(1, c.nextID, raftnode.UserData(batch(1, []byte{byte('a' + i)})), 1, 7)
		l.Raft.Flush()
		ids = append(ids, c.nextID)
	}
	for _, id := range ids {
		_, done := c.Results[id]
		require.False(t, done)
	}

	st, _ := l.Raft.Status(1)
	other := otherNode(c, l.ID)
	l.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(other), To: new(l.ID), Term: new(st.Term + 1)})
	l.Raft.Flush()
	st, _ = l.Raft.Status(1)
	require.NotEqual(t, "StateLeader", st.Role)
	// Two appends at most in flight (the leader's own, perhaps, among them):
	// the first proposals went into raft's log (overwritten or committed,
	// told later), the rest waited in the queue and are refused now.
	refused := 0
	for i, id := range ids {
		r, done := c.Results[id]
		if !done {
			require.Zero(t, refused, "proposal %d: the queued ones are the last", i)
			continue
		}
		require.ErrorIs(t, r.Err, raftnode.ErrNotLeader, "proposal %d", i)
		refused++
	}
	require.GreaterOrEqual(t, refused, 3, "the queued proposals are answered when the leadership goes")
}

// A connection's proposal stepped into raft outlives its leader's term
// undecided: a new leader may overwrite it. If the same server leads again,
// the connection's next proposal goes into the new term, behind the hole
// (simulator seed 33436 with the control plane: a produce stepped in term
// 15 and overwritten by term 17's leader, the next one of its connection
// written in term 18). So a leadership that goes fails the chains of its
// undecided proposals: their next proposal is refused, whoever leads.
func TestSteppedProposalsFailTheirChainWhenTheTermGoes(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1) // raft draws its election timeouts from crypto/rand
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{1}, nil)
	l := waitLeader(t, c, 1)
	c.nextID++
	first := c.nextID
	l.Raft.ProposeRecords(1, first, raftnode.UserData(batch(1, []byte("a"))), 1, 7)
	l.Raft.Flush() // stepped: no append in flight yet
	_, done := c.Results[first]
	require.False(t, done)

	st, _ := l.Raft.Status(1)
	l.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(otherNode(c, l.ID)), To: new(l.ID), Term: new(st.Term + 1)})
	l.Raft.Flush()
	// It leads again, in a later term: elected, or handed the leadership
	// by whoever was (its peers may refuse its campaign in their lease).
	l.Raft.Campaign(1)
	l.Raft.Flush()
	ok, err := c.RunUntil(20000, func() bool {
		switch cur := c.Leader(1); {
		case cur == l:
			return true
		case cur != nil:
			cur.Raft.TransferLeader(1, l.ID)
			cur.Raft.Flush()
		}
		return false
	})
	require.NoError(t, err)
	require.True(t, ok, "n%d leads again", l.ID)

	c.nextID++
	next := c.nextID
	l.Raft.ProposeRecords(1, next, raftnode.UserData(batch(1, []byte("b"))), 1, 7)
	l.Raft.Flush()
	r, done := c.Results[next]
	require.True(t, done, "refused at once")
	require.ErrorIs(t, r.Err, raftnode.ErrChainFailed)

	c.nextID++ // another connection's is taken
	other := c.nextID
	l.Raft.ProposeRecords(1, other, raftnode.UserData(batch(1, []byte("c"))), 1, 8)
	l.Raft.Flush()
	ok, err = c.RunUntil(20000, func() bool { _, done := c.Results[other]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[other].Err)
}
