package server

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// peers.json keeps which dirs are known only from a handshake, so a
// restart does not turn them into confirmed ones; the first format (the
// dirs alone) still loads, every dir taken as confirmed.
func TestPeersFileKeepsFirstContact(t *testing.T) {
	fsys := vfs.NewMem()
	require.NoError(t, fsys.MkdirAll("d"))
	p, err := loadPeerBook(fsys, "d", slog.Default())
	require.NoError(t, err)
	require.NoError(t, p.check(2, 0x22))
	p.applied(1, 7, &raftpb.ConfState{Voters: []uint64{1, 2, 4}}, MemberContext(4, 0x44, map[uint64]uint64{1: 0x11}))

	p, err = loadPeerBook(fsys, "d", slog.Default())
	require.NoError(t, err)
	require.Equal(t, map[uint64]uint64{2: 0x22, 4: 0x44}, p.r.Dirs())
	require.Equal(t, []uint64{2}, p.r.FirstContact(), "n4 named by a change, n2 only by its handshake")

	require.NoError(t, vfs.ReplaceFile(fsys, "d", peersFile, []byte(`{"2": 34, "3": 51}`)))
	p, err = loadPeerBook(fsys, "d", slog.Default())
	require.NoError(t, err)
	require.Equal(t, map[uint64]uint64{2: 34, 3: 51}, p.r.Dirs())
	require.Empty(t, p.r.FirstContact())

	require.NoError(t, vfs.ReplaceFile(fsys, "d", peersFile, []byte(`{"dirs": {"2": 34}, "bogus": 1}`)))
	_, err = loadPeerBook(fsys, "d", slog.Default())
	require.ErrorContains(t, err, "bogus")
}
