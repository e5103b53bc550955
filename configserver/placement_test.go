package configserver

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func cand(id uint64, dc, rack string, replicas int) Candidate {
	return Candidate{Server: Server{ID: id, DC: dc, Rack: rack, State: ServerActive}, Replicas: replicas}
}

func TestPlaceOnePerDC(t *testing.T) {
	cs := []Candidate{
		cand(1, "a", "r1", 0), cand(2, "a", "r2", 0),
		cand(3, "b", "r1", 0), cand(4, "b", "r2", 0),
		cand(5, "c", "r1", 0), cand(6, "c", "r2", 0),
	}
	got, err := Place(cs, 3, "b")
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 1, 5}, got, "preferred dc first, then the others by name, one each")

	// Load decides within a DC.
	cs[0].Replicas, cs[2].Replicas = 5, 5
	got, err = Place(cs, 3, "")
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 4, 5}, got)
}

func TestPlaceRacksWithinOneDC(t *testing.T) {
	cs := []Candidate{cand(1, "a", "r1", 0), cand(2, "a", "r1", 0), cand(3, "a", "r2", 3), cand(4, "a", "r3", 9)}
	got, err := Place(cs, 3, "")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 3, 4}, got, "never two replicas on one rack when avoidable, even if loaded")
	got, err = Place(cs, 3, "")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 3, 4}, got, "deterministic")
}

func TestPlaceFiveOverThreeDCs(t *testing.T) {
	var cs []Candidate
	for i, dc := range []string{"a", "a", "b", "b", "c", "c"} {
		cs = append(cs, cand(uint64(i+1), dc, "", 0))
	}
	got, err := Place(cs, 5, "c")
	require.NoError(t, err)
	require.Equal(t, []uint64{5, 1, 3, 6, 2}, got)
}

func TestPlaceRefuses(t *testing.T) {
	cs := []Candidate{cand(1, "a", "", 0), cand(2, "a", "", 0), cand(3, "b", "", 0)}
	cs[2].State = ServerDraining
	_, err := Place(cs, 3, "")
	require.ErrorIs(t, err, ErrPlacement)
	require.ErrorContains(t, err, "there are 2")
	cs[2].State = ServerActive
	_, err = Place(cs, 3, "z")
	require.ErrorContains(t, err, `preferred dc "z"`)
}

func TestLoadBalancesSuccessivePlacements(t *testing.T) {
	servers := []Server{{ID: 1, State: ServerActive}, {ID: 2, State: ServerActive}, {ID: 3, State: ServerActive}, {ID: 4, State: ServerActive}}
	var streams []Stream
	for range 8 {
		got, err := Place(Load(servers, streams), 3, "")
		require.NoError(t, err)
		streams = append(streams, Stream{Replicas: got})
	}
	for _, c := range Load(servers, streams) {
		require.Equal(t, 6, c.Replicas, "server %d", c.ID)
		require.Equal(t, 2, c.Leaders, "server %d", c.ID)
	}
}

// A server short of disk space is placed nothing, however idle; without
// enough others the error says why.
func TestPlaceSkipsServersShortOfDisk(t *testing.T) {
	cs := []Candidate{cand(1, "a", "", 0), cand(2, "a", "", 9), cand(3, "a", "", 9), cand(4, "a", "", 9)}
	cs[0].DiskLow = true
	got, err := Place(cs, 3, "")
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3, 4}, got)
	cs[1].DiskLow = true
	_, err = Place(cs, 3, "")
	require.ErrorIs(t, err, ErrPlacement)
	require.ErrorContains(t, err, "there are 2 (2 short of disk space)")
}
