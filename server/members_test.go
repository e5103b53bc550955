package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
)

// The membership checks of the admin API and the simulator.
func TestCheckMemberChange(t *testing.T) {
	active := func(ids ...uint64) map[uint64]raftnode.Progress {
		m := map[uint64]raftnode.Progress{}
		for _, id := range ids {
			m[id] = raftnode.Progress{Match: 100, State: "StateReplicate", RecentActive: true}
		}
		return m
	}
	gs := raftnode.GroupStatus{Voters: []uint64{1, 2, 3}, Commit: 100, Progress: active(1, 2, 3)}
	ready := Candidate{ID: 4, DirKnown: true, Connected: true}
	for _, tc := range []struct {
		name   string
		c      MemberChange
		gs     raftnode.GroupStatus
		cand   Candidate
		refuse string // "" when allowed
	}{
		{"add a connected server", AddLearner, gs, ready, ""},
		{"add a voter", AddLearner, gs, Candidate{ID: 2, DirKnown: true, Connected: true}, "already a voter"},
		{"add a server never seen", AddLearner, gs, Candidate{ID: 4}, "not connected"},
		// The leader knows the server's dir from before, but the server is
		// down: its disk may have been replaced since, and the change
		// would name the old dir (simulator seed 413).
		{"add a known server that is down", AddLearner, gs, Candidate{ID: 4, DirKnown: true}, "not connected"},
		{"add a server still known by its old dir", AddLearner, gs, Candidate{ID: 4, DirKnown: true, Stale: true, Connected: true}, "old data dir"},
		{"promote a learner not caught up", Promote, raftnode.GroupStatus{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, Commit: 500,
			Progress: active(1, 2, 3, 4)}, ready, "not caught up"},
		{"promote a caught-up learner", Promote, raftnode.GroupStatus{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, Commit: 100,
			Progress: active(1, 2, 3, 4)}, ready, ""},
		{"promote a voter", Promote, gs, Candidate{ID: 2}, "not a learner"},
		{"remove a voter", Remove, gs, Candidate{ID: 3}, ""},
		{"remove a stranger", Remove, gs, Candidate{ID: 9}, "not a member"},
		{"remove the last voter", Remove, raftnode.GroupStatus{Voters: []uint64{1}, Progress: active(1)}, Candidate{ID: 1}, "last voter"},
		{"remove when a quorum would be lost", Remove, raftnode.GroupStatus{Voters: []uint64{1, 2, 3}, Progress: active(1, 2)},
			Candidate{ID: 2}, "would lose quorum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMemberChange(tc.c, tc.gs, "orders", tc.cand, 1)
			if tc.refuse == "" {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			require.Contains(t, err.Msg, tc.refuse)
		})
	}
}
