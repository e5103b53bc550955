package configserver

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// decodeFresh is the catalog decoded from the database, cache aside.
func decodeFresh(t *testing.T, s *State) ([]Server, []Stream) {
	t.Helper()
	var srv cached[Server]
	var str cached[Stream]
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		srv, str = decodeAll[Server](tx.Bucket(bServers)), decodeAll[Stream](tx.Bucket(bStreams))
		return nil
	}))
	return srv.vals, str.vals
}

// The cache is patched record by record after every Apply: after every
// kind of command it equals the catalog decoded from the database, and
// slices handed out before stay as they were.
func TestCatalogCacheEqualsTheDatabaseAfterEveryCommand(t *testing.T) {
	s := openTestState(t)
	check := func(what string) {
		t.Helper()
		servers, streams := decodeFresh(t, s)
		require.Equal(t, servers, s.Servers(), "servers after %s", what)
		require.Equal(t, streams, s.Streams(), "streams after %s", what)
	}
	check("nothing")
	register(t, s, 3, 1, 2, 4)
	check("registers")
	var groups []uint64
	for i := range 40 {
		o := applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: fmt.Sprintf("s%02d", (i*7)%40)}, Replicas: []uint64{1, 2, 3}})
		require.NoError(t, o.Error())
		groups = append(groups, o.Stream.Group)
	}
	check("creates out of order")
	held := s.Streams()
	heldCopy := append([]Stream(nil), held...)
	cmds := []Command{
		{Kind: CmdAlter, Name: "s05", Change: &StreamChange{PreferredDC: new("dc2")}},
		{Kind: CmdSetServerState, Node: 2, Name: ServerDraining},
		{Kind: CmdRegister, At: 9, Server: &Server{ID: 2, Raft: "r2", Kafka: "k2"}},
		{Kind: CmdMoveStart, Name: "s07", Node: 3, To: 4},
		{Kind: CmdMoveStep, Name: "s07", Step: StepCatchUp},
		{Kind: CmdMoveCancel, Name: "s07"},
		{Kind: CmdDelete, Name: "s00"},
		{Kind: CmdDelete, Name: "s39"},
		{Kind: CmdCreate, Spec: &StreamSpec{Name: "s00"}, Replicas: []uint64{1, 2, 3}},
		{Kind: CmdPurge, Name: "s00", Node: groups[0]},
		{Kind: CmdDelete, Name: "nope"},                                                // fails: nothing changes
		{Kind: CmdCreate, Spec: &StreamSpec{Name: "s01"}, Replicas: []uint64{1, 2, 3}}, // exists
	}
	for _, c := range cmds {
		applyAt(t, s, c)
		check(c.Kind + " " + c.Name)
	}
	require.NoError(t, s.Apply(s.Applied(), []byte("{garbage")))
	check("a malformed command")
	require.Equal(t, heldCopy, held, "a slice handed out is never changed")
}

// A reader that saw a command applied (Applied, as a read barrier waits
// for it) then reads the catalog sees that command's change: the cache
// is patched before the commit shows. Before, it was patched after the
// transaction committed, and a reader in between read the catalog from
// before (server/TestControlledMoveBackAndForth saw a move done and the
// stream still with the old replica).
func TestCatalogNeverBehindApplied(t *testing.T) {
	s := openTestState(t)
	register(t, s, 1, 2, 3)
	require.NoError(t, applyAt(t, s, Command{Kind: CmdCreate, Spec: &StreamSpec{Name: "orders"}, Replicas: []uint64{1, 2, 3}}).Error())
	first := s.Applied()
	const alters = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range alters {
			ms := int64(1000 + i)
			b, _ := json.Marshal(Command{Kind: CmdAlter, Name: "orders", Change: &StreamChange{RetentionMs: &ms}})
			if err := s.Apply(first+int64(i), b); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { <-done }() // the state closes after the applier stops
	for {
		applied := s.Applied()
		_, streams := s.catalog()
		if n := applied - first; n > 0 {
			require.GreaterOrEqual(t, streams[0].RetentionMs, int64(1000)+n-1, "the catalog behind a command applied (%d of %d)", n, alters)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
