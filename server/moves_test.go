package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/configserver"
)

// movesCluster is a controlled cluster of four servers with a stream
// "orders" on three of them holding n acknowledged records.
func movesCluster(t *testing.T, n int) (*testCluster, *configserver.Client, configserver.StreamStatus) {
	return movesClusterWith(t, n, 0, nil)
}

// movesClusterWith is movesCluster with values of size bytes (0: small)
// and the servers' configuration changed by mod.
func movesClusterWith(t *testing.T, n, size int, mod func(*Config)) (*testCluster, *configserver.Client, configserver.StreamStatus) {
	c, svcs := newControlledClusterWith(t, mod)
	c.addServer(4)
	var apis []string
	for _, s := range svcs {
		apis = append(apis, s.APIAddr())
	}
	cc := configserver.NewClient(apis, true, c.adminClient(true, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		cs, err := cc.Cluster(ctx)
		if err != nil || len(cs.Servers) < 4 {
			return false
		}
		_, err = cc.CreateStream(ctx, configserver.StreamSpec{Name: "orders"})
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.DefaultProduceTopic("orders"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range n {
		v := fmt.Appendf(nil, "v%d", i)
		if size > len(v) {
			r := rand.New(rand.NewPCG(uint64(i), 1)) // incompressible: kgo compresses batches
			for len(v) < size {
				v = binary.LittleEndian.AppendUint64(v, r.Uint64())
			}
			v = v[:size]
		}
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr())
	}
	st, err := cc.Stream(ctx, "orders")
	require.NoError(t, err)
	return c, cc, st
}

func waitMove(t *testing.T, cc *configserver.Client, state string) configserver.MoveStatus {
	var got configserver.MoveStatus
	require.Eventually(t, func() bool {
		ms, err := cc.Moves(context.Background())
		if err != nil || len(ms) == 0 {
			return false
		}
		got = ms[0]
		return got.State == state
	}, 30*time.Second, 100*time.Millisecond, "move: %+v", &got)
	return got
}

// consumeAll reads the stream from the start until it has n records.
func consumeAll(t *testing.T, c *testCluster, n int) []string {
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < n && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

func (c *testCluster) hostsData(id uint64, group uint64) bool {
	_, err := os.Stat(filepath.Join(c.cfgs[id-1].DataDir, "streams", fmt.Sprint(group)))
	return err == nil
}

// A replica moves to the fourth server step by step; the old replica
// leaves the group and removes its copy; every acknowledged record is
// still there and the stream takes writes.
func TestControlledMoveReplica(t *testing.T) {
	c, cc, st := movesCluster(t, 50)
	var to uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(st.Replicas, id) {
			to = id
		}
	}
	from := st.Replicas[0] // the preferred leader: the move hands leadership over first
	m, err := cc.StartMove(context.Background(), configserver.MoveRequest{Stream: "orders", From: from, To: to})
	require.NoError(t, err)
	require.Equal(t, configserver.StepAddLearner, m.Step)
	_, err = cc.StartMove(context.Background(), configserver.MoveRequest{Stream: "orders", From: from, To: to})
	require.ErrorIs(t, err, configserver.ErrExists, "one move per stream at a time")

	waitMove(t, cc, configserver.MoveDone)
	after, err := cc.Stream(context.Background(), "orders")
	require.NoError(t, err)
	require.Equal(t, to, after.Replicas[0], "the new replica takes the old one's place")
	require.NotContains(t, after.Replicas, from)
	require.Eventually(t, func() bool { return !c.hostsData(from, st.Group) }, 20*time.Second, 100*time.Millisecond,
		"the old replica removed its copy")
	require.True(t, c.hostsData(to, st.Group))
	got := consumeAll(t, c, 50)
	require.Len(t, got, 50)
	require.Equal(t, "v49", got[49])
}

// Cancelled before its new replica is a voter, a move leaves the stream
// as it was: same replicas, the new server's copy removed.
func TestControlledMoveCancelled(t *testing.T) {
	c, cc, st := movesCluster(t, 20)
	var to uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(st.Replicas, id) {
			to = id
		}
	}
	_, err := cc.StartMove(context.Background(), configserver.MoveRequest{Stream: "orders", From: st.Replicas[1], To: to})
	require.NoError(t, err)
	_, err = cc.CancelMove(context.Background(), "orders")
	require.NoError(t, err)
	m := waitMove(t, cc, configserver.MoveCancelled)
	require.Contains(t, m.Reason, "cancelled at")
	after, err := cc.Stream(context.Background(), "orders")
	require.NoError(t, err)
	require.Equal(t, st.Replicas, after.Replicas)
	require.Eventually(t, func() bool { return !c.hostsData(to, st.Group) }, 20*time.Second, 100*time.Millisecond)
	require.Len(t, consumeAll(t, c, 20), 20)
}

// A server is lost: the config servers mark it down, its streams show it
// out of sync, and a move to the fourth server restores three in-sync
// replicas with every acknowledged record.
func TestControlledServerLostThenMoved(t *testing.T) {
	c, cc, st := movesCluster(t, 30)
	var spare uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(st.Replicas, id) {
			spare = id
		}
	}
	lost := st.Replicas[2]
	c.stop(int(lost - 1))
	ctx := context.Background()
	require.Eventually(t, func() bool {
		cs, err := cc.Cluster(ctx)
		if err != nil {
			return false
		}
		for _, s := range cs.Servers {
			if s.ID == lost {
				return s.Health == "down"
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond, "the lost server is marked down")
	inSync := func() []uint64 {
		for _, s := range c.servers {
			if s == nil {
				continue
			}
			if str, ok := s.stream("orders"); ok {
				if gs, ok := s.Host().Status(str.cfg.ID); ok && gs.Role == "StateLeader" {
					return gs.InSync
				}
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return len(inSync()) == 2 }, 20*time.Second, 100*time.Millisecond, "under-replicated")

	_, err := cc.StartMove(ctx, configserver.MoveRequest{Stream: "orders", From: lost})
	require.NoError(t, err, "the placement picks the spare server")
	m := waitMove(t, cc, configserver.MoveDone)
	require.Equal(t, spare, m.To)
	require.Eventually(t, func() bool { return len(inSync()) == 3 }, 20*time.Second, 100*time.Millisecond, "three in sync again")
	require.NotContains(t, inSync(), lost)
	require.Len(t, consumeAll(t, c, 30), 30)
}

// With [moves] catchup_bytes_per_sec, the new replica's catch-up (a
// snapshot install copying the stream's entries from its peers, then
// appends) goes no faster than the limit: 1.5 MB of incompressible
// records at 256 KiB/s take at least 4.9 s (the first second's burst, then
// the rate), where an unlimited move takes its control steps' time.
func TestControlledMoveCatchUpLimited(t *testing.T) {
	const rate, n, size = 256 << 10, 150, 10 << 10
	catchUp := func(limit int64) time.Duration {
		c, cc, st := movesClusterWith(t, n, size, func(cfg *Config) { cfg.Moves.CatchupBytesPerSec = limit })
		var to uint64
		for id := uint64(1); id <= 4; id++ {
			if !slices.Contains(st.Replicas, id) {
				to = id
			}
		}
		start := time.Now()
		_, err := cc.StartMove(context.Background(), configserver.MoveRequest{Stream: "orders", From: st.Replicas[1], To: to})
		require.NoError(t, err)
		var caughtUp time.Duration
		require.Eventually(t, func() bool {
			ms, err := cc.Moves(context.Background())
			if err != nil || len(ms) == 0 {
				return false
			}
			if caughtUp == 0 && (ms[0].Step == configserver.StepPromote || ms[0].Step == configserver.StepRemoveOld || ms[0].State == configserver.MoveDone) {
				caughtUp = time.Since(start)
			}
			return ms[0].State == configserver.MoveDone
		}, 60*time.Second, 50*time.Millisecond)
		require.Len(t, consumeAll(t, c, n), n)
		return caughtUp
	}
	limited := catchUp(rate)
	data := float64(n * size)
	t.Logf("catch-up of %.0f bytes with catchup_bytes_per_sec %d: %v (%.0f bytes/s)", data, rate, limited.Round(time.Millisecond), data/limited.Seconds())
	// The first second's burst, then the rate.
	require.GreaterOrEqual(t, limited.Seconds(), data/rate-1)
	free := catchUp(0)
	t.Logf("unlimited: %v", free.Round(time.Millisecond))
	require.Less(t, free, limited)
}

// A member the catalog does not have — here added behind the config
// servers' back, as the target of a move cancelled while its add was in
// flight ends up — is removed by the config servers' move driver.
func TestControlledOrphanMemberRemoved(t *testing.T) {
	c, _, st := movesCluster(t, 5)
	var orphan uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(st.Replicas, id) {
			orphan = id
		}
	}
	members := func() (MembersStatus, error) {
		var ms MembersStatus
		resp, err := c.adminClient(true, "").Get(fmt.Sprintf("https://%s/streams/orders/members", c.cfgs[st.Replicas[0]-1].AdminListen))
		if err != nil {
			return ms, err
		}
		defer resp.Body.Close()
		return ms, json.NewDecoder(resp.Body).Decode(&ms)
	}
	// The learner joins once the leader's transport reached it.
	require.Eventually(t, func() bool {
		resp, err := c.adminPost(int(st.Replicas[0]-1), fmt.Sprintf("/streams/orders/members/%d", orphan))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 200*time.Millisecond)
	ms, err := members()
	require.NoError(t, err)
	require.Contains(t, ms.Learners, orphan, "the learner was added")
	require.Eventually(t, func() bool {
		ms, err := members()
		return err == nil && !slices.Contains(ms.Learners, orphan) && !slices.Contains(ms.Voters, orphan)
	}, 20*time.Second, 200*time.Millisecond, "the config servers did not remove the orphan")
	require.Len(t, consumeAll(t, c, 5), 5)
}
