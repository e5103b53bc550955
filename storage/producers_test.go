package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// The saved producer state survives a restart and a crash, is replaced
// only by a newer one, and a file that does not check is ignored.
func TestProducerStateSaved(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	l := openMem(t, opts)
	idx, data := l.ProducerState()
	require.Zero(t, idx)
	require.Nil(t, data)
	require.NoError(t, l.SaveProducerState(7, []byte("seven")))
	require.NoError(t, l.SaveProducerState(5, []byte("older"))) // ignored
	idx, data = l.ProducerState()
	require.Equal(t, uint64(7), idx)
	require.Equal(t, []byte("seven"), data)
	require.NoError(t, l.Close())

	mem.CrashClean() // durable on return
	l = openMem(t, opts)
	idx, data = l.ProducerState()
	require.Equal(t, uint64(7), idx)
	require.Equal(t, []byte("seven"), data)
	require.NoError(t, l.SaveProducerState(9, []byte("nine")))
	require.NoError(t, l.Close())

	// A damaged file: ignored, the engine rebuilds the state from the log.
	f, err := mem.Open(opts.Dir + "/" + producersName)
	require.NoError(t, err)
	size, err := mem.Stat(opts.Dir + "/" + producersName)
	require.NoError(t, err)
	b := make([]byte, size)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	b[len(b)-6] ^= 1
	w, err := mem.Create(opts.Dir + "/" + producersName)
	require.NoError(t, err)
	_, err = w.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	l = openMem(t, opts)
	idx, data = l.ProducerState()
	require.Zero(t, idx)
	require.Nil(t, data)
	require.NoError(t, l.Close())
}

// A snapshot carries the sender's producer state; the installing replica
// keeps the newer of its own and the sender's.
func TestSnapshotCarriesProducerState(t *testing.T) {
	src := openMem(t, memOpts(vfs.NewMem()))
	require.NoError(t, src.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	for i := uint64(2); i <= 20; i++ {
		require.NoError(t, src.Write([]*pb.Entry{userEnt(i, 1, 1, 10, int64(i))}, hardState(1, 1, i)))
	}
	_, err := src.Sync()
	require.NoError(t, err)
	src.SetApplied(20)
	require.NoError(t, src.SaveProducerState(15, []byte("leader@15")))
	_, err = src.Sync()
	require.NoError(t, err)
	snap, err := src.Snapshot()
	require.NoError(t, err)
	d, err := decodeSnapDesc(snap.GetData())
	require.NoError(t, err)
	require.Equal(t, uint64(15), d.prod.index)
	require.Equal(t, []byte("leader@15"), d.prod.data)
	fetch := func(from, to uint64) ([]*pb.Entry, uint64, error) {
		ents, prev, err := src.CommittedEntries(from, to, 1<<20)
		return ents, prev, err
	}

	for _, own := range []uint64{0, 10, 18} {
		dst := openMem(t, memOpts(vfs.NewMem()))
		require.NoError(t, dst.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
		if own > 0 {
			require.NoError(t, dst.SaveProducerState(own, []byte("mine")))
		}
		require.NoError(t, dst.InstallSnapshot(snap, fetch))
		idx, data := dst.ProducerState()
		if own > 15 {
			require.Equal(t, own, idx)
			require.Equal(t, []byte("mine"), data)
		} else {
			require.Equal(t, uint64(15), idx)
			require.Equal(t, []byte("leader@15"), data)
		}
		require.NoError(t, dst.Close())
	}

	// A version 2 snapshot (no producer state) still installs.
	d.prod = producerState{}
	b, err := d.encode()
	require.NoError(t, err)
	b[0] = 2
	b = b[:len(b)-12]
	d2, err := decodeSnapDesc(b)
	require.NoError(t, err)
	require.Nil(t, d2.prod.data)
}
