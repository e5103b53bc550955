package group

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

const sec = int64(1e9)

var protos = []Protocol{{Name: "range", Metadata: []byte("m")}}

func jreq(member string) JoinRequest {
	return JoinRequest{Group: "g", MemberID: member, ClientID: "c", SessionTimeout: 10 * sec, RebalanceTimeout: 30 * sec, ProtocolType: "consumer", Protocols: protos}
}

// joinStable brings n members into a Stable group and returns their ids
// (the first is the leader) and the generation.
func joinStable(t *testing.T, c *Coordinator, now int64, n int) ([]string, int32) {
	t.Helper()
	var ids []string
	var ws []*Waiter
	for i := 0; i < n; i++ {
		w := c.Join(now, jreq(""))
		if i == 0 {
			require.True(t, w.Done()) // alone: completes at once
		}
		ws = append(ws, w)
	}
	// Everyone rejoins (the first generation only had the first member).
	if n > 1 {
		ws = ws[:0]
		ids = ids[:0]
		sum := c.Describe("g")
		for _, m := range sum.Members {
			ws = append(ws, c.Join(now, jreq(m.MemberID)))
		}
	}
	for _, w := range ws {
		require.True(t, w.Done())
		require.Equal(t, ErrNone, w.Join().Err)
		ids = append(ids, w.Join().MemberID)
	}
	gen := ws[0].Join().Generation
	leader := ws[0].Join().Leader
	require.Equal(t, ids[0], leader)
	var syncs []*Waiter
	for _, id := range ids[1:] {
		w := c.Sync(now, "g", gen, id, nil)
		require.False(t, w.Done(), "followers wait for the leader")
		syncs = append(syncs, w)
	}
	var as []Assignment
	for _, id := range ids {
		as = append(as, Assignment{MemberID: id, Assignment: []byte("a-" + id)})
	}
	lw := c.Sync(now, "g", gen, ids[0], as)
	require.True(t, lw.Done())
	require.Equal(t, "a-"+ids[0], string(lw.Sync().Assignment))
	for i, w := range syncs {
		require.True(t, w.Done())
		require.Equal(t, "a-"+ids[i+1], string(w.Sync().Assignment))
	}
	require.Equal(t, Stable, c.Describe("g").State)
	return ids, gen
}

func TestFirstJoinAssignsMemberIDAndLeads(t *testing.T) {
	c := New(Config{Nonce: "n"})
	w := c.Join(0, jreq(""))
	require.True(t, w.Done())
	r := w.Join()
	require.Equal(t, ErrNone, r.Err)
	require.Equal(t, "c-n-1", r.MemberID)
	require.Equal(t, r.MemberID, r.Leader)
	require.Equal(t, int32(1), r.Generation)
	require.Equal(t, "range", r.Protocol)
	require.Len(t, r.Members, 1)
	require.Equal(t, CompletingRebalance, c.Describe("g").State)
}

func TestMemberIDRequired(t *testing.T) {
	c := New(Config{})
	r := jreq("")
	r.RequireKnownMemberID = true
	w := c.Join(0, r)
	require.Equal(t, kerr.MemberIDRequired.Code, w.Join().Err)
	id := w.Join().MemberID
	require.NotEmpty(t, id)
	// The pending id joins.
	w2 := c.Join(1, jreq(id))
	require.Equal(t, ErrNone, w2.Join().Err)
	require.Equal(t, id, w2.Join().Leader)
	// A pending id that never comes back expires after the session timeout.
	w3 := c.Join(2, r)
	require.Equal(t, kerr.MemberIDRequired.Code, w3.Join().Err)
	c.Advance(2 + 10*sec)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Join(3+10*sec, jreq(w3.Join().MemberID)).Join().Err)
}

func TestJoinErrors(t *testing.T) {
	c := New(Config{})
	r := jreq("")
	r.Group = ""
	require.Equal(t, kerr.InvalidGroupID.Code, c.Join(0, r).Join().Err)
	r = jreq("")
	r.SessionTimeout = sec
	require.Equal(t, kerr.InvalidSessionTimeout.Code, c.Join(0, r).Join().Err)
	r.SessionTimeout = 3600 * sec
	require.Equal(t, kerr.InvalidSessionTimeout.Code, c.Join(0, r).Join().Err)
	// Unknown member of an unknown group.
	require.Equal(t, kerr.UnknownMemberID.Code, c.Join(0, jreq("nobody")).Join().Err)
	// Empty group: protocol type and protocols required.
	r = jreq("")
	r.ProtocolType = ""
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, c.Join(0, r).Join().Err)
	joinStable(t, c, 0, 1)
	// Another protocol type, or no common protocol.
	r = jreq("")
	r.ProtocolType = "connect"
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, c.Join(0, r).Join().Err)
	r = jreq("")
	r.Protocols = []Protocol{{Name: "sticky"}}
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, c.Join(0, r).Join().Err)
	// Unknown member of a known group.
	require.Equal(t, kerr.UnknownMemberID.Code, c.Join(0, jreq("nobody")).Join().Err)
}

func TestProtocolSelectionByVotes(t *testing.T) {
	c := New(Config{})
	a := jreq("")
	a.Protocols = []Protocol{{Name: "x"}, {Name: "y"}}
	wa := c.Join(0, a)
	ida := wa.Join().MemberID
	b := jreq("")
	b.Protocols = []Protocol{{Name: "y"}, {Name: "x"}}
	wb := c.Join(0, b) // rebalance: waits for a
	require.False(t, wb.Done())
	cc := jreq("")
	cc.Protocols = []Protocol{{Name: "y"}}
	wc := c.Join(0, cc)
	require.False(t, wc.Done())
	a.MemberID = ida
	wa = c.Join(0, a)
	require.True(t, wa.Done())
	require.Equal(t, "y", wa.Join().Protocol) // 2 votes against 1
	require.Len(t, wa.Join().Members, 3)
	require.Empty(t, wb.Join().Members) // followers get no member list
	require.Equal(t, wa.Join().Generation, wb.Join().Generation)
}

func TestSyncErrorsAndStates(t *testing.T) {
	c := New(Config{})
	require.Equal(t, kerr.InvalidGroupID.Code, c.Sync(0, "", 1, "x", nil).Sync().Err)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Sync(0, "g", 1, "x", nil).Sync().Err)
	w := c.Join(0, jreq(""))
	id, gen := w.Join().MemberID, w.Join().Generation
	require.Equal(t, kerr.UnknownMemberID.Code, c.Sync(0, "g", gen, "x", nil).Sync().Err)
	require.Equal(t, kerr.IllegalGeneration.Code, c.Sync(0, "g", gen+1, id, nil).Sync().Err)
	// CompletingRebalance: the leader's sync completes it.
	s := c.Sync(0, "g", gen, id, []Assignment{{MemberID: id, Assignment: []byte("A")}})
	require.Equal(t, "A", string(s.Sync().Assignment))
	// Stable: a repeated sync gets the assignment at once.
	require.Equal(t, "A", string(c.Sync(0, "g", gen, id, nil).Sync().Assignment))
	// PreparingRebalance: a new member joins, the old one's sync → 27.
	w2 := c.Join(0, jreq(""))
	require.False(t, w2.Done())
	require.Equal(t, PreparingRebalance, c.Describe("g").State)
	require.Equal(t, kerr.RebalanceInProgress.Code, c.Sync(0, "g", gen, id, nil).Sync().Err)
}

func TestSyncParkedGetsRebalanceInProgressWhenRebalanceStarts(t *testing.T) {
	c := New(Config{})
	ids, _ := joinStable(t, c, 0, 2)
	// Rejoin of the leader starts a new rebalance; the follower rejoins too.
	wl := c.Join(1, jreq(ids[0]))
	wf := c.Join(1, jreq(ids[1]))
	require.True(t, wl.Done())
	require.True(t, wf.Done())
	gen := wl.Join().Generation
	// The follower syncs and parks; then a third member joins.
	fs := c.Sync(2, "g", gen, ids[1], nil)
	require.False(t, fs.Done())
	c.Join(3, jreq(""))
	require.True(t, fs.Done())
	require.Equal(t, kerr.RebalanceInProgress.Code, fs.Sync().Err)
}

func TestHeartbeatErrorsByState(t *testing.T) {
	c := New(Config{})
	require.Equal(t, kerr.InvalidGroupID.Code, c.Heartbeat(0, "", 0, "x"))
	require.Equal(t, kerr.UnknownMemberID.Code, c.Heartbeat(0, "g", 0, "x"))
	w := c.Join(0, jreq(""))
	id, gen := w.Join().MemberID, w.Join().Generation
	// CompletingRebalance, right generation: fine (about to sync).
	require.Equal(t, ErrNone, c.Heartbeat(0, "g", gen, id))
	require.Equal(t, kerr.UnknownMemberID.Code, c.Heartbeat(0, "g", gen, "x"))
	require.Equal(t, kerr.IllegalGeneration.Code, c.Heartbeat(0, "g", gen-1, id))
	c.Sync(0, "g", gen, id, nil)
	require.Equal(t, ErrNone, c.Heartbeat(0, "g", gen, id))
	c.Join(0, jreq("")) // PreparingRebalance
	require.Equal(t, kerr.RebalanceInProgress.Code, c.Heartbeat(0, "g", gen, id))
	require.Equal(t, kerr.IllegalGeneration.Code, c.Heartbeat(0, "g", gen+1, id))
}

func TestLeaveTriggersRebalanceAndEmpties(t *testing.T) {
	c := New(Config{})
	require.Equal(t, kerr.InvalidGroupID.Code, c.Leave(0, "", "x"))
	require.Equal(t, kerr.UnknownMemberID.Code, c.Leave(0, "g", "x"))
	ids, gen := joinStable(t, c, 0, 2)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Leave(0, "g", "x"))
	// The leader leaves: the follower's heartbeat says rebalance.
	require.Equal(t, ErrNone, c.Leave(1, "g", ids[0]))
	require.Equal(t, PreparingRebalance, c.Describe("g").State)
	require.Equal(t, kerr.RebalanceInProgress.Code, c.Heartbeat(1, "g", gen, ids[1]))
	w := c.Join(2, jreq(ids[1]))
	require.True(t, w.Done())
	require.Equal(t, ids[1], w.Join().Leader, "the remaining member leads")
	require.Equal(t, gen+1, w.Join().Generation)
	// The last member leaves: Empty, next generation.
	require.Equal(t, ErrNone, c.Leave(3, "g", ids[1]))
	sum := c.Describe("g")
	require.Equal(t, Empty, sum.State)
	require.Equal(t, gen+2, sum.Generation)
	// Without offsets an empty group is forgotten.
	c.Advance(4)
	require.Equal(t, Dead, c.Describe("g").State)
}

func TestLeaveOfParkedJoiner(t *testing.T) {
	c := New(Config{})
	ids, _ := joinStable(t, c, 0, 2)
	wl := c.Join(1, jreq(ids[0])) // parks: waits for the follower
	require.False(t, wl.Done())
	require.Equal(t, ErrNone, c.Leave(2, "g", ids[0]))
	require.Equal(t, kerr.UnknownMemberID.Code, wl.Join().Err)
	// The follower alone completes the join.
	wf := c.Join(3, jreq(ids[1]))
	require.True(t, wf.Done())
	require.Equal(t, ids[1], wf.Join().Leader)
}

func TestSessionTimeoutExpiresMember(t *testing.T) {
	c := New(Config{})
	ids, gen := joinStable(t, c, 0, 2)
	// The follower keeps heartbeating; the leader goes silent.
	for now := sec; now < 10*sec; now += sec {
		require.Equal(t, ErrNone, c.Heartbeat(now, "g", gen, ids[1]))
		c.Advance(now)
	}
	require.Equal(t, 10*sec, c.NextDeadline())
	c.Advance(10 * sec)
	require.Equal(t, kerr.RebalanceInProgress.Code, c.Heartbeat(10*sec, "g", gen, ids[1]))
	w := c.Join(10*sec, jreq(ids[1]))
	require.True(t, w.Done())
	require.Equal(t, ids[1], w.Join().Leader)
	require.Len(t, w.Join().Members, 1)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Heartbeat(11*sec, "g", w.Join().Generation, ids[0]))
}

func TestRebalanceTimeoutDropsMembersThatDoNotRejoin(t *testing.T) {
	c := New(Config{})
	ids, gen := joinStable(t, c, 0, 2)
	// The leader rejoins; the follower neither rejoins nor heartbeats past
	// its session... but while the rebalance is on, only the rebalance
	// timeout (30s) decides.
	wl := c.Join(sec, jreq(ids[0]))
	require.False(t, wl.Done())
	// Keep the follower alive by heartbeats: it still does not rejoin.
	for now := 2 * sec; now < 31*sec; now += 2 * sec {
		require.Equal(t, kerr.RebalanceInProgress.Code, c.Heartbeat(now, "g", gen, ids[1]))
		c.Advance(now)
	}
	require.False(t, wl.Done())
	require.Equal(t, 31*sec, c.NextDeadline())
	c.Advance(31 * sec)
	require.True(t, wl.Done())
	require.Len(t, wl.Join().Members, 1)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Heartbeat(31*sec, "g", gen, ids[1]))
}

func TestFollowerRejoinInStableReturnsCurrentGeneration(t *testing.T) {
	c := New(Config{})
	ids, gen := joinStable(t, c, 0, 2)
	w := c.Join(1, jreq(ids[1]))
	require.True(t, w.Done())
	require.Equal(t, gen, w.Join().Generation)
	require.Equal(t, Stable, c.Describe("g").State)
	// With other metadata it rebalances.
	r := jreq(ids[1])
	r.Protocols = []Protocol{{Name: "range", Metadata: []byte("other")}}
	require.False(t, c.Join(2, r).Done())
	require.Equal(t, PreparingRebalance, c.Describe("g").State)
}

func TestCommitChecks(t *testing.T) {
	c := New(Config{})
	// Simple consumer: generation -1, no member, no group.
	require.Equal(t, ErrNone, c.CheckCommit(0, "simple", -1, ""))
	// A generation for an unknown group.
	require.Equal(t, kerr.IllegalGeneration.Code, c.CheckCommit(0, "nogroup", 3, "m"))
	w := c.Join(0, jreq(""))
	id, gen := w.Join().MemberID, w.Join().Generation
	require.Equal(t, kerr.RebalanceInProgress.Code, c.CheckCommit(0, "g", gen, id)) // CompletingRebalance
	c.Sync(0, "g", gen, id, nil)
	require.Equal(t, ErrNone, c.CheckCommit(0, "g", gen, id))
	require.Equal(t, kerr.UnknownMemberID.Code, c.CheckCommit(0, "g", gen, "x"))
	require.Equal(t, kerr.UnknownMemberID.Code, c.CheckCommit(0, "g", -1, "")) // simple commit to a live group
	require.Equal(t, kerr.IllegalGeneration.Code, c.CheckCommit(0, "g", gen+1, id))
	// Commits are heartbeats.
	require.Equal(t, ErrNone, c.CheckCommit(9*sec, "g", gen, id))
	c.Advance(12 * sec)
	require.Equal(t, ErrNone, c.Heartbeat(12*sec, "g", gen, id))
}

func TestOffsetsApplyInLogOrder(t *testing.T) {
	c := New(Config{})
	k := OffsetKey{Group: "g", Topic: "t", Partition: 0}
	c.ApplyOffset(k, &Offset{Offset: 5, Metadata: "five"}, 10)
	c.ApplyOffset(k, &Offset{Offset: 3}, 7) // older record: ignored
	o, ok := c.Offset(k)
	require.True(t, ok)
	require.Equal(t, int64(5), o.Offset)
	require.Equal(t, "five", o.Metadata)
	c.ApplyOffset(k, &Offset{Offset: 9}, 11)
	o, _ = c.Offset(k)
	require.Equal(t, int64(9), o.Offset)
	// A group with offsets is listed, Empty, and survives Advance and Unload.
	c.Advance(100 * sec)
	c.Unload()
	require.Equal(t, []Summary{{Group: "g", State: Empty}}, c.List())
	c.ApplyOffset(k, nil, 12)
	_, ok = c.Offset(k)
	require.False(t, ok)
}

func TestUnloadFailsParkedRequests(t *testing.T) {
	c := New(Config{})
	ids, _ := joinStable(t, c, 0, 2)
	w := c.Join(1, jreq(ids[0]))
	require.False(t, w.Done())
	c.Unload()
	require.Equal(t, kerr.NotCoordinator.Code, w.Join().Err)
	require.Equal(t, Dead, c.Describe("g").State)
	require.Equal(t, kerr.UnknownMemberID.Code, c.Heartbeat(2, "g", 1, ids[1]))
}

func TestCodecRoundTrip(t *testing.T) {
	commits := []Commit{
		{Key: OffsetKey{Group: "g", Topic: "t", Partition: 0}, Offset: Offset{Offset: 42, LeaderEpoch: -1, Metadata: "meta", CommitTime: 7}},
		{Key: OffsetKey{Group: "h", Topic: "u", Partition: 0}, Offset: Offset{Offset: 1, LeaderEpoch: 3, Metadata: "", CommitTime: 8}},
	}
	b := EncodeCommits(commits, 99)
	// The log stamps the base offset.
	b[7] = 100
	var got []Commit
	var offs []int64
	bad, err := DecodeBatches(append(b, b...), func(off, _ int64, k OffsetKey, o *Offset) {
		offs = append(offs, off)
		got = append(got, Commit{Key: k, Offset: *o})
	})
	require.NoError(t, err)
	require.Zero(t, bad)
	require.Equal(t, []int64{100, 101, 100, 101}, offs)
	require.Equal(t, append(commits, commits...), got)
	_, err = DecodeBatches(b[:30], func(int64, int64, OffsetKey, *Offset) {})
	require.Error(t, err)
}

func TestDeterministicMemberIDs(t *testing.T) {
	run := func() []string {
		c := New(Config{Nonce: "x"})
		var out []string
		for i := 0; i < 3; i++ {
			out = append(out, c.Join(int64(i), jreq("")).Join().MemberID)
		}
		return out
	}
	require.Equal(t, run(), run())
}

// Groups and their members are bounded: a join beyond either cap gets
// GROUP_MAX_SIZE_REACHED, and the coordinator goes on serving the rest.
func TestGroupCaps(t *testing.T) {
	c := New(Config{MaxMembers: 2, MaxGroups: 2})
	require.Equal(t, ErrNone, c.Join(0, jreq("")).Join().Err)
	c.Join(0, jreq("")) // the second member (its join completes with the rebalance)
	require.Equal(t, kerr.GroupMaxSizeReached.Code, c.Join(0, jreq("")).Join().Err, "a third member")

	other := jreq("")
	other.Group = "h"
	require.Equal(t, ErrNone, c.Join(0, other).Join().Err)
	third := jreq("")
	third.Group = "k"
	require.Equal(t, kerr.GroupMaxSizeReached.Code, c.Join(0, third).Join().Err, "a third group")
	require.Len(t, c.List(), 2)
}
