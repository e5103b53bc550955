package memcluster

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"testing/cryptotest"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/clustertest"
	"github.com/vdl-project/vdl/raftnode/producers"
)

// Idempotent producers through the engine: the leader answers retries
// with the original offsets (whether the original is queued, in the log
// or committed), refuses gaps and stale epochs, and every replica —
// restarted or caught up through a snapshot — holds the same producer
// table.

// idem is one idempotent produce: a batch of n records from seq on.
func idem(pid int64, epoch int16, seq int32, n int) []byte {
	values := make([][]byte, n)
	for i := range values {
		values[i] = []byte(fmt.Sprintf("p%d-e%d-s%d", pid, epoch, int(seq)+i))
	}
	return raftnode.UserData(clustertest.IdempotentBatch(pid, epoch, seq, values...))
}

// proposeWait proposes on the group's leader and runs until the outcome.
func proposeWait(t *testing.T, c *Cluster, group uint64, data []byte) raftnode.Complete {
	t.Helper()
	for range 20 {
		id := c.Propose(waitLeader(t, c, group), group, data)
		waitResults(t, c, []raftnode.ProposalID{id})
		r := c.Results[id]
		if r.Err == nil || !isRetriable(r.Err) {
			return r
		}
	}
	t.Fatal("no outcome after 20 attempts")
	return raftnode.Complete{}
}

func isRetriable(err error) bool {
	for _, e := range []error{raftnode.ErrNotLeader, raftnode.ErrOverwritten, raftnode.ErrUnknownOutcome, raftnode.ErrProducersLoading} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// requireProducersEqual runs until every live replica applied the same
// index, then checks their producer tables are byte-identical.
func requireProducersEqual(t *testing.T, c *Cluster, group uint64) []byte {
	t.Helper()
	var ref []byte
	ok, err := c.RunUntil(10000, func() bool {
		ref = nil
		var idx uint64
		for _, n := range c.Nodes() {
			if n.Down {
				continue
			}
			b, i, ok := n.Raft.Producers(group)
			if !ok || (ref != nil && i != idx) {
				return false
			}
			if ref == nil {
				ref, idx = b, i
			} else if !bytes.Equal(ref, b) {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, ok, "replicas' producer tables differ")
	return ref
}

// withoutIndex re-encodes a table as of index 0 (new leaders' empty
// entries move the index, not the producers).
func withoutIndex(t *testing.T, b []byte) []byte {
	tb, err := producers.Decode(b, producers.DefaultExpirationMs)
	require.NoError(t, err)
	tb.Index = 0
	return producers.Encode(tb)
}

// values reads the group's committed log on a live node.
func logValues(t *testing.T, n *Node, group uint64) []string {
	t.Helper()
	l := n.Logs[group]
	bs, err := l.Read(l.StartOffset(), n.HighWatermark(group), 1<<30)
	require.NoError(t, err)
	var out []string
	for _, b := range bs {
		kbs, err := clustertest.SplitBatches(b.Data)
		require.NoError(t, err)
		for _, kb := range kbs {
			vs, err := kb.Values()
			require.NoError(t, err)
			for _, v := range vs {
				out = append(out, string(v))
			}
		}
	}
	return out
}

func TestIdempotentRetriesAnsweredWithOriginalOffsets(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 11)
	c := newCluster(t, 11, []uint64{1, 2, 3}, []uint64{1}, nil)
	first := proposeWait(t, c, 1, idem(7, 0, 0, 2))
	require.NoError(t, first.Err)
	again := proposeWait(t, c, 1, idem(7, 0, 0, 2))
	require.NoError(t, again.Err)
	require.Equal(t, first.BaseOffset, again.BaseOffset, "a retry gets the original's offsets")
	require.Equal(t, first.NextOffset, again.NextOffset)

	// Refusals: a gap, a new epoch not at 0, an old epoch, an unknown
	// producer past 0.
	require.ErrorIs(t, proposeWait(t, c, 1, idem(7, 0, 3, 1)).Err, raftnode.ErrOutOfOrderSequence)
	require.ErrorIs(t, proposeWait(t, c, 1, idem(7, 1, 2, 1)).Err, raftnode.ErrOutOfOrderSequence)
	require.ErrorIs(t, proposeWait(t, c, 1, idem(8, 0, 4, 1)).Err, raftnode.ErrUnknownProducer)
	require.NoError(t, proposeWait(t, c, 1, idem(7, 1, 0, 1)).Err) // epoch bump (KIP-360)
	require.ErrorIs(t, proposeWait(t, c, 1, idem(7, 0, 2, 1)).Err, raftnode.ErrProducerEpoch)

	// Five requests in flight, none in the log yet, and a retry of the
	// third while they are queued: all in sequence, the retry answered
	// with the third's offsets once it commits.
	l := waitLeader(t, c, 1)
	var ids []raftnode.ProposalID
	for i := range 5 {
		c.nextID++
		ids = append(ids, c.nextID)
		l.Raft.Propose(1, c.nextID, idem(7, 1, int32(1+2*i), 2))
	}
	c.nextID++
	retry := c.nextID
	l.Raft.Propose(1, retry, idem(7, 1, 5, 2))
	l.Raft.Flush()
	waitResults(t, c, append(ids, retry))
	for i, id := range ids {
		require.NoError(t, c.Results[id].Err, "request %d", i)
	}
	require.NoError(t, c.Results[retry].Err)
	require.Equal(t, c.Results[ids[2]].BaseOffset, c.Results[retry].BaseOffset)
	require.Equal(t, c.Results[ids[2]].NextOffset, c.Results[retry].NextOffset)

	// Retried again, now committed: answered at once.
	again = proposeWait(t, c, 1, idem(7, 1, 5, 2))
	require.Equal(t, c.Results[ids[2]].BaseOffset, again.BaseOffset)
	// Older than the last five: out of order (Kafka keeps five).
	require.ErrorIs(t, proposeWait(t, c, 1, idem(7, 1, 0, 1)).Err, raftnode.ErrOutOfOrderSequence)

	end := proposeWait(t, c, 1, raftnode.UserData(batch(1, []byte("plain")))).NextOffset
	requireConverged(t, c, 1, end)
	requireProducersEqual(t, c, 1)
	vals := logValues(t, waitLeader(t, c, 1), 1)
	seen := map[string]bool{}
	for _, v := range vals {
		require.False(t, seen[v], "value %q twice in the log", v)
		seen[v] = true
	}
}

// Leaders crash with uncommitted idempotent entries; the producer retries
// each batch (with the same sequence) until it is acknowledged, at
// whichever leader. Every batch ends up in the log exactly once, and the
// replicas' producer tables agree, also after every node restarted.
func TestIdempotentRetriesAcrossLeaderCrashes(t *testing.T) {
	for seed := uint64(20); seed < 26; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, seed)
			c := newCluster(t, seed, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) {
				cfg.Core.ProducerSaveBytes = 2 << 10 // save often: restarts load saved states
			})
			const batches = 40
			acked := map[int]raftnode.Complete{}
			for b := 0; b < batches; b++ {
				data := idem(3, 0, int32(2*b), 2)
				for attempt := 0; ; attempt++ {
					require.Less(t, attempt, 50, "batch %d never acknowledged", b)
					l := waitLeader(t, c, 1)
					id := c.Propose(l, 1, data)
					if b%7 == 3 && attempt == 0 {
						// Crash the leader right after it appended (and maybe
						// sent) the entry: its outcome is unknown.
						require.NoError(t, c.Run(int(seed%4)))
						c.Crash(l.ID)
						waitLeader(t, c, 1)
						require.NoError(t, c.Restart(l.ID))
						continue
					}
					ok, err := c.RunUntil(3000, func() bool { _, done := c.Results[id]; return done })
					require.NoError(t, err)
					if r := c.Results[id]; ok && r.Err == nil {
						acked[b] = r
						break
					} else if ok {
						require.True(t, isRetriable(r.Err), "batch %d: %v", b, r.Err)
					}
				}
			}
			for b := 1; b < batches; b++ {
				require.Equal(t, acked[b-1].NextOffset, acked[b].BaseOffset, "batch %d follows batch %d", b, b-1)
			}
			end := acked[batches-1].NextOffset
			for _, n := range c.Nodes() {
				require.NoError(t, c.Restart(n.ID))
			}
			requireConverged(t, c, 1, end)
			before := requireProducersEqual(t, c, 1)
			vals := logValues(t, waitLeader(t, c, 1), 1)
			require.Len(t, vals, 2*batches, "each batch exactly once")

			for _, n := range c.Nodes() {
				c.Crash(n.ID)
			}
			for _, n := range c.Nodes() {
				require.NoError(t, c.Restart(n.ID))
			}
			// The last batch retried after everything restarted: a duplicate.
			r := proposeWait(t, c, 1, idem(3, 0, int32(2*(batches-1)), 2))
			require.NoError(t, r.Err)
			require.Equal(t, acked[batches-1].BaseOffset, r.BaseOffset)
			after := requireProducersEqual(t, c, 1)
			require.Equal(t, withoutIndex(t, before), withoutIndex(t, after), "the restarts rebuilt the same producers")
		})
	}
}

// A follower that lagged behind retention catches up through a snapshot
// (the entries before the leader's log start are not copied): its
// producer table is the others', taken from the snapshot, and as leader
// it answers a retry of a batch written before it caught up.
func TestIdempotentStateThroughSnapshot(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 31)
	c := newCluster(t, 31, []uint64{1, 2, 3}, []uint64{1}, func(cfg *Config) {
		cfg.SegmentSize = 16 << 10
		cfg.Core.ProducerSaveBytes = 1 << 30 // only retention saves
	})
	require.NoError(t, proposeWait(t, c, 1, idem(5, 0, 0, 1)).Err)
	l := waitLeader(t, c, 1)
	lagger := uint64(1)
	if l.ID == 1 {
		lagger = 2
	}
	c.Crash(lagger)
	var last raftnode.Complete
	for i := range 300 { // rolls many segments; producer 5 writes only at the start
		data := raftnode.UserData(batch(1+i%3, clustertest.Value(fmt.Sprintf("v%d", i), 40)))
		if i < 4 {
			data = idem(5, 0, int32(1+i), 1)
		}
		last = proposeWait(t, c, 1, data)
		require.NoError(t, last.Err)
	}
	r := proposeWait(t, c, 1, raftnode.RetainData(last.BaseOffset))
	require.NoError(t, r.Err)
	last = proposeWait(t, c, 1, raftnode.UserData(batch(1, []byte("after"))))
	require.Greater(t, waitLeader(t, c, 1).Logs[1].StartOffset(), int64(5), "retention deleted producer 5's batches")

	require.NoError(t, c.Restart(lagger))
	requireConverged(t, c, 1, last.NextOffset)
	require.Greater(t, c.Node(lagger).Logs[1].StartOffset(), int64(5), "the lagger caught up through a snapshot")
	requireProducersEqual(t, c, 1)

	// The lagger leads: it knows producer 5 from the snapshot alone.
	for _, n := range c.Nodes() {
		if n.ID != lagger {
			c.Crash(n.ID)
			require.NoError(t, c.Restart(n.ID))
		}
	}
	for range 50 {
		if l := waitLeader(t, c, 1); l.ID == lagger {
			break
		}
		c.Crash(waitLeader(t, c, 1).ID)
		require.NoError(t, c.Run(200))
		for _, n := range c.Nodes() {
			require.NoError(t, c.Restart(n.ID))
		}
	}
	require.Equal(t, lagger, waitLeader(t, c, 1).ID)
	r = proposeWait(t, c, 1, idem(5, 0, 4, 1))
	require.NoError(t, r.Err)
	require.Less(t, r.BaseOffset, int64(10), "answered with the original's (deleted) offset")
	require.ErrorIs(t, proposeWait(t, c, 1, idem(5, 0, 7, 1)).Err, raftnode.ErrOutOfOrderSequence)
	require.NoError(t, proposeWait(t, c, 1, idem(5, 0, 5, 1)).Err)
}
