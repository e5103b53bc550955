package raftnode

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// A sync job of many logs makes every one durable whether it runs them
// one after the other (the simulator) or many at once (the Host), and a
// failed fsync fails the job either way.
func TestSyncJobRunsEveryLog(t *testing.T) {
	for _, n := range []int{1, 4, 64} {
		mem := vfs.NewMem()
		efs := vfs.NewErrorFS(mem)
		var logs []Log
		for k := range 40 {
			l, err := storage.Open(storage.Options{FS: efs, Dir: fmt.Sprintf("/g%d", k), Stream: uint64(k + 1), SegmentSize: 64 << 10})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			require.NoError(t, l.Write(nil, &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2))}))
			logs = append(logs, l)
		}
		efs.SetFaults(vfs.Faults{FailSyncs: 1})
		require.ErrorIs(t, (&SyncJob{logs: logs, done: []Append{{}}}).RunConcurrently(n), vfs.ErrIO, "n=%d: a failed fsync fails the job", n)
		efs.SetFaults(vfs.Faults{})
		for k, l := range logs { // the failed log is unusable (fail-stop): a fresh one
			l.(*storage.Log).Close()
			l, err := storage.Open(storage.Options{FS: efs, Dir: fmt.Sprintf("/g%d", k), Stream: uint64(k + 1), SegmentSize: 64 << 10})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			require.NoError(t, l.Write(nil, &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2))}))
			logs[k] = l
		}
		before := mem.Stats().Syncs
		j := &SyncJob{logs: logs, done: []Append{{}}}
		require.NoError(t, j.RunConcurrently(n), "n=%d", n)
		require.GreaterOrEqual(t, mem.Stats().Syncs-before, int64(len(logs)), "n=%d: every log synced", n)
		mem.CrashClean()
		for k := range logs {
			l, err := storage.Open(storage.Options{FS: mem, Dir: fmt.Sprintf("/g%d", k), Stream: uint64(k + 1), SegmentSize: 64 << 10})
			require.NoError(t, err)
			hs, _, err := l.InitialState()
			require.NoError(t, err)
			require.Equal(t, uint64(3), hs.GetTerm(), "n=%d log %d: the vote survived", n, k)
			require.NoError(t, l.Close())
		}
	}
}

// Appends that write nothing (raft sends pre-vote answers through them)
// cost no fsync: their logs are not in the sync job, and their answers
// still wait their turn in it. An append with a hard state or entries
// brings its log in.
func TestEmptyAppendsCostNoFsync(t *testing.T) {
	mem := vfs.NewMem()
	open := func(k int) Log {
		l, err := storage.Open(storage.Options{FS: mem, Dir: fmt.Sprintf("/g%d", k), Stream: uint64(k + 1), SegmentSize: 64 << 10})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l
	}
	empty, vote := open(1), open(2)
	msg := func(m *raftpb.Message) *raftpb.Message {
		m.Type = raftpb.MsgStorageAppend.Enum()
		return m
	}
	j := &WriteJob{items: []writeItem{
		{e: Append{Group: 1, Msg: msg(&raftpb.Message{Responses: []*raftpb.Message{{Type: raftpb.MsgPreVoteResp.Enum()}}})}, l: empty},
		{e: Append{Group: 2, Msg: msg(&raftpb.Message{Term: new(uint64(4)), Vote: new(uint64(2)), Commit: new(uint64(0))})}, l: vote},
	}}
	s := j.syncJob()
	require.NotNil(t, s)
	require.Len(t, s.done, 2, "both appends are reported, in order")
	require.Equal(t, []Log{vote}, s.logs, "only the log with a vote is synced")

	j.items = j.items[:1]
	s = j.syncJob()
	require.NotNil(t, s)
	require.Empty(t, s.logs)
	require.Len(t, s.done, 1)
	require.NoError(t, s.RunConcurrently(32))
}
