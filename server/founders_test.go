package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/configserver"
)

// TestLateFounderBootstrapsWithFounders: a founding replica that comes to
// host its stream only after a move of another replica started (it was
// down when the stream was created) must bootstrap the group with the
// voters the stream was created with, like the other founders — not with
// the replicas, which now include the move's target: two founders with
// different initial memberships could each elect a leader in one term.
// The simulator found it (seed 780 with -sim.controlplane).
func TestLateFounderBootstrapsWithFounders(t *testing.T) {
	st := configserver.Stream{Name: "c3", Group: 102,
		Replicas: []uint64{3, 2, 5, 1}, Dirs: []uint64{33, 22, 55, 0}, // a move from 5 to 1 under way
		Founders: []uint64{2, 3, 5}, State: configserver.StreamActive}
	s := &Server{cfg: Config{NodeID: 2}, ident: Identity{NodeID: 2, DirID: 22}}
	sc := s.streamConfigOf(st)
	require.False(t, sc.Join, "server 2 founds the stream")
	require.Equal(t, []uint64{2, 3, 5}, sc.bootstrapVoters())

	// The move's target joins (no founding dir): it bootstraps nothing.
	s = &Server{cfg: Config{NodeID: 1}, ident: Identity{NodeID: 1, DirID: 11}}
	require.True(t, s.streamConfigOf(st).Join)

	// A stream recorded before Founders: the replicas with a founding dir.
	st.Founders = nil
	require.Equal(t, []uint64{2, 3, 5}, st.FoundingVoters())
}
