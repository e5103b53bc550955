package configserver

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func openTestState(t *testing.T) *State {
	t.Helper()
	s, err := OpenState(filepath.Join(t.TempDir(), "state.db"))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// applyAt applies cmd at the next offset and returns its outcome.
func applyAt(t *testing.T, s *State, cmd Command) Outcome {
	t.Helper()
	off := s.Applied()
	b, err := json.Marshal(cmd)
	require.NoError(t, err)
	require.NoError(t, s.Apply(off, b))
	o, ok := s.Outcome(off)
	require.True(t, ok)
	return o
}

func register(t *testing.T, s *State, ids ...uint64) {
	for _, id := range ids {
		o := applyAt(t, s, Command{Kind: CmdRegister, At: 1, Server: &Server{ID: id, Raft: "r", Kafka: "k"}})
		require.NoError(t, o.Error())
	}
}

func TestStateCreateDeletePurge(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3)
	spec := &StreamSpec{Name: "orders", ReplicationFactor: 3}
	o := applyAt(t, s, Command{Kind: CmdCreate, At: 5, Spec: spec, Replicas: []uint64{2, 1, 3}})
	require.NoError(t, o.Error())
	require.Equal(t, uint64(firstStreamGroupID), o.Stream.Group)
	require.Equal(t, []uint64{2, 1, 3}, o.Stream.Replicas)
	require.Equal(t, int64(DefaultRetentionMs), o.Stream.RetentionMs)

	// The same name again: exists; a bad placement: refused, state unchanged.
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: spec, Replicas: []uint64{1, 2, 3}}).Error(), ErrExists)
	bad := &StreamSpec{Name: "b", ReplicationFactor: 3}
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: bad, Replicas: []uint64{1, 2, 9}}).Error(), ErrPlacement)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: bad, Replicas: []uint64{1, 1, 2}}).Error(), ErrPlacement)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "a b"}, Replicas: []uint64{1, 2, 3}}).Error(), ErrInvalid)
	require.Len(t, s.Streams(), 1)

	// Delete frees the name at once; the tombstone stays until purged.
	o = applyAt(t, s, Command{Kind: CmdDelete, Name: "orders"})
	require.NoError(t, o.Error())
	_, err := s.Stream("orders")
	require.ErrorIs(t, err, ErrNotFound)
	o = applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "orders"}, Replicas: []uint64{1, 2, 3}})
	require.NoError(t, o.Error())
	require.Equal(t, uint64(firstStreamGroupID+1), o.Stream.Group, "a new group, never the deleted one's")
	require.Len(t, s.Streams(), 2)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdPurge, Name: "orders", Node: firstStreamGroupID}).Error())
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdPurge, Name: "orders", Node: firstStreamGroupID}).Error(), ErrNotFound)
	require.Len(t, s.Streams(), 1)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdDelete, Name: "nope"}).Error(), ErrNotFound)
}

func TestStateApplyIsIdempotentAndSkipsGarbage(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3)
	b, _ := json.Marshal(Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "x"}, Replicas: []uint64{1, 2, 3}})
	off := s.Applied()
	require.NoError(t, s.Apply(off, b))
	v := s.Version()
	require.NoError(t, s.Apply(off, b), "a replayed offset is skipped")
	require.Len(t, s.Streams(), 1)
	require.Equal(t, v, s.Version())

	require.NoError(t, s.Apply(s.Applied(), []byte("{not json")))
	o, ok := s.Outcome(s.Applied() - 1)
	require.True(t, ok)
	require.ErrorIs(t, o.Error(), ErrInvalid)
	require.Equal(t, v, s.Version(), "garbage changes nothing")
}

func TestStateAlterAndServerState(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "x"}, Replicas: []uint64{1, 2, 3}}).Error())
	o := applyAt(t, s, Command{Kind: CmdAlter, Name: "x", Change: &StreamChange{RetentionMs: new(int64(60000)), PreferredDC: new("dc2")}})
	require.NoError(t, o.Error())
	require.Equal(t, int64(60000), o.Stream.RetentionMs)
	require.Equal(t, "dc2", o.Stream.PreferredDC)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdAlter, Name: "x", Change: &StreamChange{RetentionMs: new(int64(0))}}).Error(), ErrInvalid)
	st, err := s.Stream("x")
	require.NoError(t, err)
	require.Equal(t, int64(60000), st.RetentionMs, "a refused alter changes nothing")

	require.NoError(t, applyAt(t, s, Command{Kind: CmdSetServerState, Node: 2, Name: ServerDraining}).Error())
	require.Equal(t, ServerDraining, s.Servers()[1].State)
	register(t, s, 2) // a re-registration keeps the state
	require.Equal(t, ServerDraining, s.Servers()[1].State)
	require.ErrorIs(t, applyAt(t, s, Command{Kind: CmdSetServerState, Node: 9, Name: ServerDraining}).Error(), ErrNotFound)
	require.GreaterOrEqual(t, len(s.Ops(100)), 6)
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "orders.v1", "A_b-c"} {
		require.NoError(t, ValidateName(ok), ok)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "__x", string(make([]byte, 250))} {
		require.ErrorIs(t, ValidateName(bad), ErrInvalid, bad)
	}
}

// The catalog read after each change decodes only the records that
// changed, and always matches the database: changed records are new,
// unchanged ones identical, deleted ones gone.
func TestStateCatalogFollowsEveryChange(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3)
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: name}, Replicas: []uint64{1, 2, 3}}).Error())
		require.Equal(t, name, s.Streams()[len(s.Streams())-1].Name)
	}
	before := s.Streams()
	require.NoError(t, applyAt(t, s, Command{Kind: CmdAlter, Name: "b", Change: &StreamChange{PreferredDC: new("dc2")}}).Error())
	after := s.Streams()
	require.Equal(t, before[0], after[0])
	require.Equal(t, "dc2", after[1].PreferredDC)
	require.Equal(t, "b", after[1].Name)
	require.Equal(t, before[2], after[2])
	require.Equal(t, []uint64{1, 2, 3}, after[2].Replicas)

	require.NoError(t, applyAt(t, s, Command{Kind: CmdSetServerState, Node: 3, Name: ServerDraining}).Error())
	require.Equal(t, ServerDraining, s.Servers()[2].State)
	require.Equal(t, ServerActive, s.Servers()[0].State)

	require.NoError(t, applyAt(t, s, Command{Kind: CmdDelete, Name: "a"}).Error())
	require.NoError(t, applyAt(t, s, Command{Kind: CmdPurge, Name: "a", Node: after[0].Group}).Error())
	var names []string
	for _, st := range s.Streams() {
		names = append(names, st.Name)
	}
	require.Equal(t, []string{"b", "c"}, names)
}
