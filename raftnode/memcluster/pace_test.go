package memcluster

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// catchUp adds n4 as a learner of group 1, then writes 256 KiB while it is one,
// and runs until it has everything. It returns the bytes of appends the
// leader sent to learners in each tick from the learner's add on.
func catchUp(t *testing.T, limit int64) (perTick []int64) {
	c := newCluster(t, 7, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) {
		cfg.Delay, cfg.DiskDelay = 0, 0
		cfg.Core.LearnerBytesPerTick = limit
	})
	l := waitLeader(t, c, 1)
	_, err := c.AddNode(4)
	require.NoError(t, err)
	last := l.Raft.LearnerBytes()
	sample := func() {
		if c.steps%c.cfg.TickEvery == 0 {
			now := l.Raft.LearnerBytes()
			perTick = append(perTick, now-last)
			last = now
		}
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(4))}}}
	waitResults(t, c, []raftnode.ProposalID{c.ProposeConfChange(l, 1, cc)})
	// Its first catch-up is a snapshot install (entries copied by the
	// installer, paced apart: raftnode.PacedFetch); then appends.
	n4 := c.Node(4)
	ok, err := c.RunUntil(20000, func() bool { sample(); return n4.HighWatermark(1) == l.HighWatermark(1) })
	require.NoError(t, err)
	require.True(t, ok)
	var ids []raftnode.ProposalID
	for range 256 {
		ids = append(ids, c.Propose(l, 1, raftnode.UserData(batch(1, bytes.Repeat([]byte("x"), 1000)))))
	}
	ok, err = c.RunUntil(200000, func() bool {
		sample()
		for _, id := range ids {
			if _, done := c.Results[id]; !done {
				return false
			}
		}
		return n4.HighWatermark(1) == l.HighWatermark(1)
	})
	require.NoError(t, err)
	require.True(t, ok, "the learner did not catch up")
	require.Equal(t, l, c.Leader(1), "the leader changed")
	return perTick
}

// TestLearnerCatchUpPaced: with LearnerBytesPerTick, the appends sent to a
// learner catching up stay within the budget over any span of ticks — one
// tick's burst and one message over at most — and the catch-up takes as
// long as the budget implies; without it, it goes at full speed.
func TestLearnerCatchUpPaced(t *testing.T) {
	const limit = 8 << 10
	perTick := catchUp(t, limit)
	var sent, biggest int64
	for _, b := range perTick {
		sent += b
		biggest = max(biggest, b)
	}
	ticks := len(perTick)
	t.Logf("paced at %d bytes/tick: caught up in %d ticks, %d bytes of appends to the learner (%.0f a tick), the largest tick %d", limit, ticks, sent, float64(sent)/float64(ticks), biggest)
	require.Greater(t, sent, int64(256*1000), "the data did not go through the pacing")
	for w := 1; w <= ticks; w++ {
		for i := 0; i+w <= ticks; i++ {
			var sum int64
			for _, b := range perTick[i : i+w] {
				sum += b
			}
			// biggest: one message (raft batches proposals into entries
			// of up to 64 KiB here; one may overdraw the bucket).
			require.LessOrEqual(t, sum, int64(w+1)*limit+biggest, "%d ticks from tick %d", w, i)
		}
	}

	free := catchUp(t, 0)
	t.Logf("unpaced: caught up in %d ticks", len(free))
	require.Less(t, len(free)*4, ticks, "the pacing did not slow the catch-up")
}

// TestSilentLearnerKeepsItsGroupAwake: a leader does not sleep without a
// silent learner, as it does without a silent voter: a learner never
// campaigns, so when its server came back nothing would wake the group to
// catch it up (the simulator's seed 659: a replacement's learner stuck at
// match 0 for good).
func TestSilentLearnerKeepsItsGroupAwake(t *testing.T) {
	c := newCluster(t, 7, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) { cfg.Delay, cfg.DiskDelay = 0, 0 })
	l := waitLeader(t, c, 1)
	_, err := c.AddNode(4)
	require.NoError(t, err)
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(4))}}}
	waitResults(t, c, []raftnode.ProposalID{c.ProposeConfChange(l, 1, cc)})
	n4 := c.Node(4)
	caughtUp := func() bool {
		st, _ := l.Raft.Status(1)
		return st.Progress[4].Match == st.Commit && n4.HighWatermark(1) == l.HighWatermark(1)
	}
	waitResults(t, c, []raftnode.ProposalID{c.Propose(l, 1, raftnode.UserData(batch(1, []byte("before"))))})
	ok, err := c.RunUntil(20000, caughtUp)
	require.NoError(t, err)
	require.True(t, ok, "the learner caught up")

	c.Crash(4)
	require.NoError(t, c.Run(3*electionTick*c.cfg.TickEvery))
	require.False(t, l.Raft.Quiesced(1), "asleep without its silent learner")
	require.NoError(t, c.Restart(4))
	id := c.Propose(l, 1, raftnode.UserData(batch(1, []byte("after"))))
	ok, err = c.RunUntil(20000, func() bool {
		_, done := c.Results[id]
		return done && caughtUp()
	})
	require.NoError(t, err)
	require.True(t, ok, "the learner caught up after its restart")
}
