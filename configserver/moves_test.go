package configserver

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The move driver's decisions, step by step, and cancelled at each step:
// a cancel before the old replica is removed takes the new one back out.
func TestNextMoveAction(t *testing.T) {
	m := Move{Stream: "s", From: 1, To: 4, State: MoveActive}
	base := GroupReport{Commit: 100, Voters: []uint64{1, 2, 3}}
	learner := base
	learner.Learners = []uint64{4}
	learner.Followers = []FollowerReport{{ID: 4, Match: 60, Active: true}}
	caughtUp := learner
	caughtUp.Followers = []FollowerReport{{ID: 4, Match: 100, Active: true}}
	voter := GroupReport{Commit: 100, Voters: []uint64{1, 2, 3, 4}}
	removed := GroupReport{Commit: 100, Voters: []uint64{2, 3, 4}}
	for _, tc := range []struct {
		name   string
		step   string
		cancel bool
		rep    GroupReport
		leader uint64
		want   moveAction
	}{
		{"add the learner", StepAddLearner, false, base, 2, moveAction{kind: actAddLearner, node: 4}},
		{"learner added", StepAddLearner, false, learner, 2, moveAction{kind: actRecord, cmd: CmdMoveStep, step: StepCatchUp}},
		{"catching up", StepCatchUp, false, learner, 2, moveAction{kind: actWait, reason: "the new replica is catching up"}},
		{"caught up", StepCatchUp, false, caughtUp, 2, moveAction{kind: actRecord, cmd: CmdMoveStep, step: StepPromote}},
		{"promote", StepPromote, false, caughtUp, 2, moveAction{kind: actPromote, node: 4}},
		{"promoted", StepPromote, false, voter, 2, moveAction{kind: actRecord, cmd: CmdMoveStep, step: StepRemoveOld}},
		{"leadership off the old replica", StepRemoveOld, false, voter, 1, moveAction{kind: actTransfer, node: 4}},
		{"remove the old replica", StepRemoveOld, false, voter, 2, moveAction{kind: actRemove, node: 1}},
		{"done", StepRemoveOld, false, removed, 2, moveAction{kind: actRecord, cmd: CmdMoveEnd, step: MoveDone}},

		{"cancel before the learner", StepAddLearner, true, base, 2, moveAction{kind: actRecord, cmd: CmdMoveEnd, step: MoveCancelled, reason: "cancelled at add-learner"}},
		{"cancel a learner", StepCatchUp, true, learner, 2, moveAction{kind: actRemove, node: 4}},
		{"cancel before promoting", StepPromote, true, caughtUp, 2, moveAction{kind: actRemove, node: 4}},
		{"cancel a new voter", StepPromote, true, voter, 2, moveAction{kind: actRemove, node: 4}},
		// At remove-old the old replica's removal may be in flight: the
		// move finishes (seed 3430: both were removed).
		{"cancelled at remove-old: finish", StepRemoveOld, true, voter, 2, moveAction{kind: actRemove, node: 1}},
		{"cancelled at remove-old: leadership off the old", StepRemoveOld, true, voter, 1, moveAction{kind: actTransfer, node: 4}},
		{"cancelled, new one out", StepRemoveOld, true, base, 2, moveAction{kind: actRecord, cmd: CmdMoveEnd, step: MoveCancelled, reason: "cancelled at remove-old"}},
		{"cancel too late", StepRemoveOld, true, removed, 2, moveAction{kind: actRecord, cmd: CmdMoveEnd, step: MoveDone, reason: "cancel came too late: the old replica was removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mv := m
			mv.Step, mv.Cancel = tc.step, tc.cancel
			require.Equal(t, tc.want, nextMoveAction(mv, tc.rep, tc.leader))
		})
	}
}

// Moves in the state machine: the catalog gains the new replica at the
// start (a joiner: dir 0), and loses the old one at the end (the new one
// in its slot) or the new one when cancelled.
func TestStateMoves(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3, 4)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "x"}, Replicas: []uint64{1, 2, 3}}).Error())
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 9, To: 4}).Error(), ErrInvalid)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 1, To: 2}).Error(), ErrInvalid)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 1, To: 4}).Error())
	st, _ := s.Stream("x")
	require.Equal(t, []uint64{1, 2, 3, 4}, st.Replicas)
	require.Equal(t, uint64(0), st.Dirs[3])
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 2, To: 4}).Error(), ErrExists)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveStep, Name: "x", Step: StepCatchUp}).Error())
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveEnd, Name: "x", Step: MoveDone}).Error())
	st, _ = s.Stream("x")
	require.Equal(t, []uint64{4, 2, 3}, st.Replicas)

	require.Equal(t, []uint64{1}, st.Former)

	// Never back to a server the stream left (it would rejoin empty
	// under the identity a stale replica still counts).
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 2, To: 1}).Error(), ErrInvalid)
	register(t, s, 5)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 2, To: 5}).Error())
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveCancel, Name: "x"}).Error())
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStep, Name: "x", Step: StepPromote}).Error(), ErrInvalid, "a cancelled move goes no further")
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveEnd, Name: "x", Step: MoveCancelled}).Error())
	st, _ = s.Stream("x")
	require.Equal(t, []uint64{4, 2, 3}, st.Replicas)
	require.Equal(t, []uint64{1, 5}, st.Former, "a cancelled move's target may have joined: former too")
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 2, To: 5}).Error(), ErrInvalid)
	require.Equal(t, MoveCancelled, s.Moves()[0].State)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdMoveCancel, Name: "x"}).Error(), ErrNotFound)
}

// A cancel is refused once a move is removing the old replica: that
// removal may be on its way, and taking the new replica out too left the
// group short of both (simulator seed 3430: voters [2 3], catalog
// [2 4 3]). The move finishes instead.
func TestMoveCancelRefusedAtRemoveOld(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3, 4)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "x"}, Replicas: []uint64{1, 2, 3}}).Error())
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveStart, Name: "x", Node: 1, To: 4}).Error())
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveStep, Name: "x", Step: StepRemoveOld}).Error())
	err := applyAt(t, s, Command{Kind: CmdMoveCancel, Name: "x"}).Error()
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "too late to cancel")
	require.False(t, s.Moves()[0].Cancel)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdMoveEnd, Name: "x", Step: MoveDone}).Error())
	st, _ := s.Stream("x")
	require.Equal(t, []uint64{4, 2, 3}, st.Replicas)
}

// TestOrphans: a member the catalog does not have (the target of a move
// cancelled while its add was in flight) is an orphan; catalog replicas
// are not.
func TestOrphans(t *testing.T) {
	st := Stream{Name: "s", Replicas: []uint64{3, 1, 2}}
	require.Empty(t, Orphans(st, GroupReport{Voters: []uint64{1, 2, 3}}))
	require.Equal(t, []uint64{4}, Orphans(st, GroupReport{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}))
	require.Equal(t, []uint64{4, 5}, Orphans(st, GroupReport{Voters: []uint64{5, 1, 2, 3}, Learners: []uint64{4}}))
	require.Empty(t, Orphans(st, GroupReport{Voters: []uint64{1, 2}}), "a missing member is not an orphan")
}
