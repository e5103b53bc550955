package raftnode

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// nopDriver starts nothing: the test looks at what the node queues.
type nopDriver struct{ writes []*WriteJob }

func (nopDriver) Send(uint64, *raftpb.Message) {}
func (d *nopDriver) Write(j *WriteJob)         { d.writes = append(d.writes, j) }
func (nopDriver) Sync(*SyncJob)                {}
func (nopDriver) Install(*InstallJob)          {}
func (nopDriver) Complete(Complete)            {}
func (nopDriver) Publish(uint64, View)         {}
func (nopDriver) Stopped(error)                {}

// A group removed while the rest of its snapshot's append (the install
// finished) waits for the writer takes it out of the queue: it was
// written to no log (simulator seed 3006 with the control plane: the
// server panicked on a nil log) or, were the group added back, to the
// new one.
func TestRemovedGroupDropsItsInstalledAppend(t *testing.T) {
	d := &nopDriver{}
	n := NewNode(NodeConfig{Core: Config{ID: 1}}, d)
	l, err := storage.Open(storage.Options{FS: vfs.NewMem(), Dir: "/g7", Stream: 7, SegmentSize: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	require.NoError(t, n.AddGroup(7, l))
	n.pipe.writing = &WriteJob{} // the writer is busy: what is queued waits
	n.pipe.queue = append(n.pipe.queue, installed{Append{Group: 7, Msg: &raftpb.Message{Term: new(uint64(2))}}})

	n.RemoveGroup(7)
	require.Empty(t, n.pipe.queue)
	n.pipe.writing = nil
	n.kick()
	require.Empty(t, d.writes, "nothing left to write")
}
