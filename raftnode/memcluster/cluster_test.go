package memcluster

import (
	"bytes"
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/clustertest"
	"github.com/vdl-project/vdl/storage"
)

// batch builds a valid Kafka RecordBatch v2 of n records with the same value.
func batch(n int, payload []byte) []byte {
	values := make([][]byte, n)
	for i := range values {
		values[i] = payload
	}
	return clustertest.Batch(values...)
}

func newCluster(t *testing.T, seed uint64, nodes []uint64, groups []uint64, mod func(*Config)) *Cluster {
	t.Helper()
	cfg := Config{Seed: seed, Nodes: nodes, Groups: groups, Delay: 0.2, DiskDelay: 0.3}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func waitLeader(t *testing.T, c *Cluster, group uint64) *Node {
	t.Helper()
	var l *Node
	ok, err := c.RunUntil(5000, func() bool { l = c.Leader(group); return l != nil })
	require.NoError(t, err)
	require.True(t, ok, "no leader elected in group %d", group)
	return l
}

// waitResults runs the cluster until every proposal in ids completed.
func waitResults(t *testing.T, c *Cluster, ids []raftnode.ProposalID) {
	t.Helper()
	ok, err := c.RunUntil(20000, func() bool {
		for _, id := range ids {
			if _, done := c.Results[id]; !done {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "proposals did not complete")
}

// produce proposes count batches on the group's leader and runs until all
// complete, returning the successful results.
func produce(t *testing.T, c *Cluster, group uint64, count int) []raftnode.Complete {
	t.Helper()
	var ids []raftnode.ProposalID
	for len(ids) < count {
		l := waitLeader(t, c, group)
		id := c.Propose(l, group, raftnode.UserData(batch(1+len(ids)%3, []byte(fmt.Sprintf("v%d", len(ids))))))
		require.NoError(t, c.Run(1))
		if r, done := c.Results[id]; done && r.Err != nil {
			continue // not leader any more: retry
		}
		ids = append(ids, id)
	}
	waitResults(t, c, ids)
	var out []raftnode.Complete
	for _, id := range ids {
		out = append(out, c.Results[id])
	}
	return out
}

func TestReplicationAndOffsets(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	c := newCluster(t, 1, []uint64{1, 2, 3}, []uint64{7}, nil)
	res := produce(t, c, 7, 50)
	next := int64(0)
	for _, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, next, r.BaseOffset, "offsets are dense in proposal order")
		next = r.NextOffset
	}
	// Every replica converges to byte-identical logs.
	requireConverged(t, c, 7, next)
}

// requireConverged runs the cluster until every replica's high watermark is
// hwm, then checks their logs are byte-identical.
func requireConverged(t *testing.T, c *Cluster, group uint64, hwm int64) {
	t.Helper()
	ok, err := c.RunUntil(5000, func() bool {
		for _, n := range c.Nodes() {
			if n.HighWatermark(group) != hwm {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "replicas did not converge")
	requireIdentical(t, c, group)
}

func requireIdentical(t *testing.T, c *Cluster, group uint64) {
	t.Helper()
	var ref []byte
	for i, n := range c.Nodes() {
		if n.Down {
			continue
		}
		l := n.Logs[group]
		bs, err := l.Read(l.StartOffset(), n.HighWatermark(group), 1<<30)
		require.NoError(t, err)
		var all []byte
		for _, b := range bs {
			all = append(all, b.Data...)
		}
		if i == 0 || ref == nil {
			ref = all
			continue
		}
		require.True(t, bytes.Equal(ref, all), "replica n%d differs", n.ID)
	}
}

func TestCrashRestartLosesNothingAcknowledged(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 2)
	c := newCluster(t, 2, []uint64{1, 2, 3}, []uint64{1}, nil)
	acked := produce(t, c, 1, 20)
	l := waitLeader(t, c, 1)
	c.Crash(l.ID)
	acked = append(acked, produce(t, c, 1, 20)...)
	require.NoError(t, c.Restart(l.ID))
	acked = append(acked, produce(t, c, 1, 5)...)
	end := acked[len(acked)-1].NextOffset
	ok, err := c.RunUntil(10000, func() bool {
		for _, n := range c.Nodes() {
			if n.HighWatermark(1) < end {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "restarted node did not catch up")
	requireIdentical(t, c, 1)
	for i := 1; i < len(acked); i++ {
		require.Equal(t, acked[i-1].NextOffset, acked[i].BaseOffset)
	}
}

func TestMinorityLeaderCannotCommit(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 3)
	c := newCluster(t, 3, []uint64{1, 2, 3}, []uint64{1}, nil)
	produce(t, c, 1, 3)
	old := waitLeader(t, c, 1)
	c.Isolate(old.ID)
	id := c.Propose(old, 1, raftnode.UserData(batch(1, []byte("lost"))))
	require.NoError(t, c.Run(300))
	r, done := c.Results[id]
	require.False(t, done && r.Err == nil, "a minority leader acknowledged a write")
	c.Heal()
	produce(t, c, 1, 3)
	require.NoError(t, c.Run(500))
	r, done = c.Results[id]
	require.True(t, done, "the isolated proposal must resolve after heal")
	require.ErrorIs(t, r.Err, raftnode.ErrOverwritten)
}

func TestMembershipChange(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 4)
	c := newCluster(t, 4, []uint64{1, 2, 3}, []uint64{1}, nil)
	produce(t, c, 1, 5)
	l := waitLeader(t, c, 1)
	// Remove node 3, then the group runs on two voters.
	id := c.ProposeConfChange(l, 1, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(3))}}})
	ok, err := c.RunUntil(5000, func() bool { _, done := c.Results[id]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[id].Err)
	produce(t, c, 1, 5)
	s, _ := waitLeader(t, c, 1).Raft.Status(1)
	require.Equal(t, []uint64{1, 2}, s.Voters)
}

func TestDeterministicTraceHash(t *testing.T) {
	run := func() string {
		var h string
		t.Run("run", func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, 42)
			c := newCluster(t, 42, []uint64{1, 2, 3}, []uint64{1, 2}, func(cfg *Config) { cfg.DropRate = 0.05 })
			produce(t, c, 1, 20)
			c.Crash(2)
			produce(t, c, 2, 10)
			require.NoError(t, c.Restart(2))
			produce(t, c, 1, 10)
			h = c.TraceHash()
		})
		return h
	}
	a, b := run(), run()
	require.NotEmpty(t, a)
	require.Equal(t, a, b, "the same seed must replay the same trace")
}

func TestCatchUpAfterRetentionThroughSnapshot(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 5)
	c := newCluster(t, 5, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) { cfg.SegmentSize = 16 << 10 })
	produce(t, c, 1, 10)
	l := waitLeader(t, c, 1)
	lagger := uint64(1)
	if l.ID == 1 {
		lagger = 2
	}
	c.Crash(lagger)
	res := produce(t, c, 1, 300) // rolls many 16 KiB segments
	cut := res[len(res)/2].BaseOffset
	l = waitLeader(t, c, 1)
	id := c.Propose(l, 1, raftnode.RetainData(cut))
	ok, err := c.RunUntil(5000, func() bool { _, done := c.Results[id]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.Results[id].Err)
	// A later write makes the applied index durable; retention runs on apply.
	produce(t, c, 1, 5)
	id = c.Propose(waitLeader(t, c, 1), 1, raftnode.RetainData(cut))
	_, err = c.RunUntil(5000, func() bool { _, done := c.Results[id]; return done })
	require.NoError(t, err)
	start := waitLeader(t, c, 1).Logs[1].StartOffset()
	require.Greater(t, start, int64(0), "retention deleted head segments on the leader")
	require.LessOrEqual(t, start, cut)

	require.NoError(t, c.Restart(lagger))
	end := produce(t, c, 1, 5)[4].NextOffset
	n := c.Node(lagger)
	ok, err = c.RunUntil(20000, func() bool { return n.HighWatermark(1) == end })
	require.NoError(t, err)
	require.True(t, ok, "lagging follower did not catch up (hwm %d, want %d)", n.HighWatermark(1), end)
	require.Equal(t, start, n.Logs[1].StartOffset(), "the follower starts where the leader's log starts")
	requireIdentical(t, c, 1)
}

// Proposals stepped together are merged into entries of up to 64 KiB; each
// still learns its own offsets, and its records are stored at them.
func TestSmallProposalsShareEntries(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 3)
	c := newCluster(t, 3, []uint64{1, 2, 3}, []uint64{7}, nil)
	l := waitLeader(t, c, 7)
	value := func(i int) []byte { return []byte(fmt.Sprintf("v%04d-%s", i, bytes.Repeat([]byte{'x'}, 900))) }
	const n = 300
	var ids []raftnode.ProposalID
	for i := range n { // all in one step: they go into raft together
		ids = append(ids, c.Propose(l, 7, raftnode.UserData(batch(1+i%3, value(i)))))
	}
	bad := c.Propose(l, 7, raftnode.UserData([]byte("not a batch")))
	waitResults(t, c, ids)
	require.ErrorIs(t, c.Results[bad].Err, storage.ErrBadEntry, "a malformed user payload fails at once")

	next := int64(0)
	entries := map[uint64]int{}
	for i, id := range ids {
		r := c.Results[id]
		require.NoError(t, r.Err)
		require.Equal(t, next, r.BaseOffset, "offsets are dense in proposal order")
		require.Equal(t, int64(1+i%3), r.NextOffset-r.BaseOffset)
		next = r.NextOffset
		entries[r.Index]++
	}
	require.Less(t, len(entries), n/20, "about 64 proposals of 1 KiB per entry")

	// Each proposal's records are stored at the offsets it was told.
	log := l.Logs[7]
	bs, err := log.Read(0, next, 1<<30)
	require.NoError(t, err)
	var run []byte
	for _, b := range bs {
		run = append(run, b.Data...)
	}
	kbs, err := clustertest.SplitBatches(run)
	require.NoError(t, err)
	require.Len(t, kbs, n)
	for i, kb := range kbs {
		require.Equal(t, c.Results[ids[i]].BaseOffset, kb.Base)
		vs, err := kb.Values()
		require.NoError(t, err)
		require.Equal(t, value(i), vs[0])
	}
	requireConverged(t, c, 7, next)
}

// Messages from the network are checked before raft sees them: types only
// local code creates (a proposal: VDL never forwards them) are dropped, and
// so are appends carrying an entry the log cannot hold. One forged MsgProp
// with a malformed entry once fail-stopped the leader and a follower.
func TestForgedMessagesAreDropped(t *testing.T) {
	c := newCluster(t, 7, []uint64{1, 2, 3}, []uint64{1}, nil)
	produce(t, c, 1, 3)
	l := waitLeader(t, c, 1)
	var f *Node
	for _, n := range c.Nodes() {
		if n != l {
			f = n
		}
	}
	last, err := l.Logs[1].LastIndex()
	require.NoError(t, err)
	term, err := l.Logs[1].Term(last)
	require.NoError(t, err)
	malformedUser := &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Index: proto.Uint64(last + 1), Term: proto.Uint64(term),
		Data: []byte{storage.TagUser, 1, 2, 3}}
	malformedConf := &raftpb.Entry{Type: raftpb.EntryConfChangeV2.Enum(), Index: proto.Uint64(last + 1), Term: proto.Uint64(term),
		Data: []byte{0xff, 0xff, 0xff}}
	u64 := proto.Uint64
	l.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: u64(f.ID), To: u64(l.ID),
		Entries: []*raftpb.Entry{{Type: raftpb.EntryNormal.Enum(), Data: malformedUser.Data}}})
	for _, e := range []*raftpb.Entry{malformedUser, malformedConf} {
		f.Raft.Step(1, &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: u64(l.ID), To: u64(f.ID), Term: u64(term),
			LogTerm: u64(term), Index: u64(last), Commit: u64(last), Entries: []*raftpb.Entry{e}})
	}
	require.NoError(t, c.Run(500), "no server stopped")
	for _, n := range c.Nodes() {
		got, err := n.Logs[1].LastIndex()
		require.NoError(t, err)
		require.Equal(t, last, got, "node %d appended nothing forged", n.ID)
	}
	produce(t, c, 1, 3) // and the group goes on
}

// The offsets a produce was counted to take (the Kafka front end's count,
// handed on through ProposeRecords instead of walking the batches again)
// are checked when its entry applies, against what the storage stamped: a
// miscount would acknowledge records at offsets they do not have, so the
// core stops (the Host turns the panic into a fail-stop).
func TestMiscountedOffsetsStopTheCore(t *testing.T) {
	c := newCluster(t, 3, []uint64{1, 2, 3}, []uint64{1}, nil)
	l := waitLeader(t, c, 1)
	c.nextID++
	l.Raft.ProposeRecords(1, c.nextID, raftnode.UserData(batch(3, []byte("v"))), 3, 0)
	l.Raft.Flush()
	ok, err := c.RunUntil(5000, func() bool { _, done := c.Results[c.nextID]; return done })
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(3), c.Results[c.nextID].NextOffset-c.Results[c.nextID].BaseOffset, "counted right: acknowledged")

	c.nextID++
	l.Raft.ProposeRecords(1, c.nextID, raftnode.UserData(batch(3, []byte("v"))), 2, 0) // three records counted as two
	l.Raft.Flush()
	require.PanicsWithValue(t, "raftnode: group 1: entry 4 holds offsets [3, 6) but its proposals were counted to end at 5", func() {
		_, _ = c.RunUntil(5000, func() bool { return false })
	})
}
