package server

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// The roster refuses a peer that comes back with another data dir, until
// it left every group here (then it is forgotten) or a membership change
// names its new dir; a leader that still knows the old dir says so (Stale)
// instead of naming it in a change.
func TestRosterDataDirs(t *testing.T) {
	r := NewRoster(map[uint64]uint64{2: 0x22, 3: 0x33}, nil)
	r.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	r.Hosted(2, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})

	rec, err := r.Admit(2, 0x22)
	require.NoError(t, err)
	require.False(t, rec, "known and the same: nothing to record")
	rec, err = r.Admit(4, 0x44)
	require.NoError(t, err)
	require.True(t, rec, "a peer not known yet is recorded on first contact")

	_, err = r.Admit(3, 0x99) // node 3's disk was replaced
	require.ErrorIs(t, err, errDirChanged)
	require.True(t, r.Stale(3))

	// Removed from group 1 only: still known by the old dir.
	require.False(t, r.Applied(1, 1, &raftpb.ConfState{Voters: []uint64{1, 2}}, nil))
	_, err = r.Admit(3, 0x99)
	require.Error(t, err)
	// Removed from every group: forgotten; the dir it presented (on a
	// connection that stays up: no new handshake) is the one known now.
	require.True(t, r.Applied(1, 2, &raftpb.ConfState{Voters: []uint64{1, 2}}, nil))
	require.False(t, r.Stale(3))
	d, known := r.Dir(3)
	require.True(t, known)
	require.Equal(t, uint64(0x99), d)
	rec, err = r.Admit(3, 0x99)
	require.NoError(t, err)
	require.False(t, rec)
	// A server forgotten without having come back is simply unknown.
	r3 := NewRoster(map[uint64]uint64{3: 0x33}, nil)
	r3.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	require.True(t, r3.Applied(1, 1, &raftpb.ConfState{Voters: []uint64{1, 2}}, nil))
	_, known = r3.Dir(3)
	require.False(t, known)

	// A change adding it back names its dir: every replica records it.
	r2 := NewRoster(map[uint64]uint64{3: 0x33}, nil)
	r2.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2}})
	require.True(t, r2.Applied(1, 1, &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}, MemberContext(3, 0x99, nil)))
	d, _ = r2.Dir(3)
	require.Equal(t, uint64(0x99), d)
	_, err = r2.Admit(3, 0x33)
	require.Error(t, err, "the old dir is refused once the new one is named")
}

// A peer that lost its data dir is heard only as a leader or a candidate:
// its votes and acknowledgements never count as the old server's, but a
// server that missed its replacement (it was down) still follows it when a
// quorum made it leader (simulator seed 236: the replaced server led every
// group, and a server that missed the change refused it for good).
func TestRosterHearsAStaleServerOnlyAsLeader(t *testing.T) {
	r := NewRoster(map[uint64]uint64{2: 0x22, 3: 0x33}, nil)
	r.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgVoteResp, raftpb.MsgAppResp, raftpb.MsgHeartbeatResp} {
		require.True(t, r.Hears(3, typ), "a peer with its own dir is heard: %v", typ)
	}
	_, err := r.Admit(3, 0x99)
	require.ErrorIs(t, err, errDirChanged)
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgVote, raftpb.MsgPreVote, raftpb.MsgTimeoutNow} {
		require.True(t, r.Hears(3, typ), "a leader's or candidate's request: %v", typ)
	}
	for _, typ := range []raftpb.MessageType{raftpb.MsgAppResp, raftpb.MsgHeartbeatResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp,
		raftpb.MsgProp, raftpb.MsgReadIndex, raftpb.MsgReadIndexResp, raftpb.MsgTransferLeader} {
		require.False(t, r.Hears(3, typ), "its own state is not counted: %v", typ)
	}
	// A change naming the new dir: heard again.
	r.Applied(1, 1, &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}, MemberContext(3, 0x99, nil))
	require.True(t, r.Hears(3, raftpb.MsgAppResp))
}

// A peer that lost its data dir is told only answers: what this server
// knows of its progress (a heartbeat's commit index, an append's match) is
// the old disk's (simulator seed 16: a wiped follower panicked on a
// heartbeat committing entries it no longer had).
func TestRosterTellsAStaleServerOnlyAnswers(t *testing.T) {
	r := NewRoster(map[uint64]uint64{3: 0x33}, nil)
	require.True(t, r.Tells(3, 1, raftpb.MsgHeartbeat))
	_, err := r.Admit(3, 0x99)
	require.ErrorIs(t, err, errDirChanged)
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgVote, raftpb.MsgPreVote, raftpb.MsgTimeoutNow} {
		require.False(t, r.Tells(3, 1, typ), "no request as its leader or candidate: %v", typ)
	}
	for _, typ := range []raftpb.MessageType{raftpb.MsgAppResp, raftpb.MsgHeartbeatResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp} {
		require.True(t, r.Tells(3, 1, typ), "answers to its requests: %v", typ)
	}
}

// A request raft computed from a node's progress before the node left a
// group is not sent once the removal applied: the node may be back on an
// empty disk, and forgetting its old dir (it left every group) lifts the
// stale-dir rule (simulator seed 559 with quiescence).
func TestRosterTellsNoRequestToANodeThatLeftTheGroup(t *testing.T) {
	r := NewRoster(map[uint64]uint64{1: 0x11, 2: 0x22, 3: 0x33}, nil)
	r.Hosted(7, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	_, err := r.Admit(1, 0x99) // n1 is back on a wiped disk
	require.ErrorIs(t, err, errDirChanged)
	require.False(t, r.Tells(1, 7, raftpb.MsgHeartbeat), "stale dir")

	r.Applied(2, 7, &raftpb.ConfState{Voters: []uint64{2, 3}}, nil) // n1 removed: forgotten
	require.False(t, r.Stale(1), "the new dir is the known one now")
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgTimeoutNow} {
		require.False(t, r.Tells(1, 7, typ), "a request in a group it left: %v", typ)
	}
	require.True(t, r.Tells(1, 7, raftpb.MsgVoteResp), "answers still go")
	require.True(t, r.Tells(1, 0, raftpb.MsgHeartbeat), "a group not hosted here (liveness): no membership to check")

	r.Applied(2, 7, &raftpb.ConfState{Voters: []uint64{2, 3}, Learners: []uint64{1}}, MemberContext(1, 0x99, nil))
	require.True(t, r.Tells(1, 7, raftpb.MsgApp), "added back as a learner")
	r.Hosted(8, &raftpb.ConfState{Voters: []uint64{2, 3}, VotersOutgoing: []uint64{1, 2, 3}})
	require.True(t, r.Tells(1, 8, raftpb.MsgHeartbeat), "an outgoing voter of a joint configuration is a member")
}

// A replica that joined with an empty log knows no membership until a
// snapshot brings it: its requests are not held back meanwhile, and once
// the install reports the membership it is checked again (simulator
// control-plane seed 17: a founder whose log could not be created hosted
// its group with no membership, and after its snapshot install could
// never campaign, so the balancer's transfers to it never happened).
func TestRosterEmptyMembershipIsUnknown(t *testing.T) {
	r := NewRoster(map[uint64]uint64{1: 0x11, 2: 0x22, 3: 0x33}, nil)
	r.Hosted(7, &raftpb.ConfState{})
	require.True(t, r.Tells(2, 7, raftpb.MsgVote), "membership unknown yet")
	r.Applied(1, 7, &raftpb.ConfState{Voters: []uint64{1, 2}}, nil) // the snapshot's
	require.True(t, r.Tells(2, 7, raftpb.MsgVote))
	require.False(t, r.Tells(3, 7, raftpb.MsgVote), "3 is not a member")
}

// A message goes out only to the data dir it was decided for (Addressee,
// checked by the transport when it writes the message): the known dir of
// a peer in good standing, the dir a refused peer presented (it is sent
// only answers), none for a peer not known.
func TestRosterAddressee(t *testing.T) {
	r := NewRoster(map[uint64]uint64{2: 0x22, 3: 0x33}, nil)
	r.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	require.Equal(t, uint64(0x22), r.Addressee(2))
	require.Zero(t, r.Addressee(4), "not known: whoever presents itself")

	_, err := r.Admit(3, 0x99) // node 3's disk was replaced
	require.ErrorIs(t, err, errDirChanged)
	require.False(t, r.Tells(3, 1, raftpb.MsgHeartbeat))
	require.True(t, r.Tells(3, 1, raftpb.MsgVoteResp))
	require.Equal(t, uint64(0x99), r.Addressee(3), "answers go to the process that asked")

	// Removed everywhere and forgotten: its new dir is the known one, and a
	// heartbeat decided before (for 0x33) no longer goes to it.
	require.True(t, r.Applied(1, 1, &raftpb.ConfState{Voters: []uint64{1, 2}}, nil))
	require.Equal(t, uint64(0x99), r.Addressee(3))
}

// A snapshot install jumps over a node's removal and its re-add with a
// replaced disk: the membership alone does not say which dir it is (a
// member before and after), the re-add's context, replayed after it, does.
// A replayed context of a node no longer a member records nothing.
func TestRosterInstallAcrossARemoveAndReAdd(t *testing.T) {
	r := NewRoster(map[uint64]uint64{2: 0x22, 3: 0x33}, nil)
	r.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	_, err := r.Admit(3, 0x99) // node 3's disk was replaced
	require.ErrorIs(t, err, errDirChanged)
	cs := &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}
	require.False(t, r.Applied(1, 1, cs, nil))
	require.True(t, r.Stale(3), "known by its old dir: nothing said otherwise")
	require.True(t, r.Applied(1, 1, cs, MemberContext(3, 0x99, nil)))
	require.False(t, r.Stale(3))
	d, _ := r.Dir(3)
	require.Equal(t, uint64(0x99), d)

	require.False(t, r.Applied(1, 1, cs, MemberContext(4, 0x44, nil)), "node 4 was added and removed again")
	_, known := r.Dir(4)
	require.False(t, known)
}

// A server that left every group here is forgotten while its raft stream
// stays up: a leader asked to add it back takes the dir it presented on
// that stream (no new handshake records it), and one whose stream is down
// waits for it. Before, the leader refused it as not connected for as
// long as the stream lived, and a move back stalled.
func TestRosterCandidateForgottenWhileConnected(t *testing.T) {
	r := NewRoster(map[uint64]uint64{2: 0x22, 4: 0x44}, nil)
	r.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	require.True(t, r.Applied(3, 1, &raftpb.ConfState{Voters: []uint64{1, 3, 4}}, nil), "node 2 left: forgotten")

	c, dir := r.Candidate(2, true, 0x22)
	require.Equal(t, Candidate{ID: 2, DirKnown: true, Connected: true}, c)
	require.Equal(t, uint64(0x22), dir, "the dir on the stream that stayed up")
	require.Nil(t, CheckMemberChange(AddLearner, raftnode.GroupStatus{Voters: []uint64{1, 3, 4}}, "orders", c, 3))

	c, dir = r.Candidate(2, false, 0)
	require.False(t, c.DirKnown)
	require.Zero(t, dir)
	require.NotNil(t, CheckMemberChange(AddLearner, raftnode.GroupStatus{Voters: []uint64{1, 3, 4}}, "orders", c, 3), "not connected: wait")

	c, dir = r.Candidate(4, true, 0x44)
	require.Equal(t, Candidate{ID: 4, DirKnown: true, Connected: true}, c)
	require.Equal(t, uint64(0x44), dir, "known: the roster's dir")
}

// A server whose own disk was replaced starts with an empty roster: the
// change adding it back names the other members' dirs, and it records
// them, so a peer whose disk was replaced too is refused when it first
// meets it instead of being taken at first contact with its empty disk
// (simulator seed 5329: the replaced n3 first met n2 after n2's wipe, took
// its new dir, and won an election with its vote, losing acknowledged
// writes). Dirs it knows already stay.
func TestRosterJoinerLearnsMembersDirs(t *testing.T) {
	r := NewRoster(nil, nil) // n3, on a new disk
	cs := &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}
	r.Hosted(1, &raftpb.ConfState{})
	require.True(t, r.Applied(3, 1, cs, MemberContext(3, 0x33, map[uint64]uint64{1: 0x11, 2: 0x22, 3: 0x33, 9: 0x99})))
	d, known := r.Dir(2)
	require.True(t, known)
	require.Equal(t, uint64(0x22), d, "learned from the log")
	_, known = r.Dir(9)
	require.False(t, known, "not a member")
	_, known = r.Dir(3)
	require.False(t, known, "itself")
	_, err := r.Admit(2, 0xbad)
	require.ErrorIs(t, err, errDirChanged, "n2 on a new disk is refused, not taken at first contact")
	require.True(t, r.Stale(2))

	r2 := NewRoster(map[uint64]uint64{2: 0x2222}, nil)
	r2.Hosted(1, &raftpb.ConfState{Voters: []uint64{1, 2}})
	r2.Applied(3, 1, cs, MemberContext(3, 0x33, map[uint64]uint64{2: 0x22}))
	d, _ = r2.Dir(2)
	require.Equal(t, uint64(0x2222), d, "a dir known stays")

	// What a leader names: the members it knows, itself included.
	r2.Hosted(1, cs)
	require.Equal(t, map[uint64]uint64{1: 0x11, 2: 0x2222}, r2.MemberDirs(1, 1, 0x11), "n3's dir unknown here: left out")
}

// A replaced server that meets a peer before it applies its own addition
// takes the peer's dir at first contact; if that peer's disk was replaced
// too, the dir is an empty disk's. The change adding the server names the
// dir the quorum knows, and it wins over the handshake: the peer is then
// refused as a replaced one (its votes not heard) instead of counting as
// the server whose log it lost. A dir a change named stays.
func TestRosterChangeOverridesFirstContact(t *testing.T) {
	r := NewRoster(nil, nil) // n3, on a new disk
	record, err := r.Admit(2, 0xbad)
	require.NoError(t, err)
	require.True(t, record)
	require.Equal(t, []uint64{2}, r.FirstContact())
	r.Hosted(1, &raftpb.ConfState{})
	cs := &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}
	require.True(t, r.Applied(3, 1, cs, MemberContext(3, 0x33, map[uint64]uint64{1: 0x11, 2: 0x22})))
	d, _ := r.Dir(2)
	require.Equal(t, uint64(0x22), d, "the quorum's word, not the handshake's")
	require.True(t, r.Stale(2), "n2 presented another dir: a replaced disk")
	require.False(t, r.Hears(2, raftpb.MsgVoteResp), "its votes do not count as the old disk's")
	require.Equal(t, uint64(0xbad), r.Addressee(2))
	require.Empty(t, r.FirstContact(), "confirmed")

	// Confirmed by a change, a dir stays.
	r.Applied(3, 1, cs, MemberContext(3, 0x33, map[uint64]uint64{2: 0x2222}))
	d, _ = r.Dir(2)
	require.Equal(t, uint64(0x22), d)

	// The same dir at first contact and in the change: confirmed, nothing refused.
	r2 := NewRoster(map[uint64]uint64{1: 0x11}, []uint64{1})
	r2.Hosted(1, &raftpb.ConfState{})
	require.True(t, r2.Applied(3, 1, cs, MemberContext(3, 0x33, map[uint64]uint64{1: 0x11})))
	require.False(t, r2.Stale(1))
	require.Empty(t, r2.FirstContact())
}
