package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/kafka"
)

// groupConsume joins group g on s1, consumes n records committing after each
// poll, and closes (leaving the group). It returns the records' offsets and
// values.
func groupConsume(t *testing.T, c *Cluster, g string, n int) ([]int64, []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.ConsumerGroup(g), kgo.ConsumeTopics("s1"),
		kgo.DisableAutoCommit(), kgo.Balancers(kgo.RangeBalancer()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RetryTimeout(30*time.Second))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var offs []int64
	var vals []string
	for len(vals) < n {
		fs := cl.PollRecords(ctx, n-len(vals))
		require.NoError(t, ctx.Err(), "got %d of %d", len(vals), n)
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error (retried): %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			offs = append(offs, r.Offset)
			vals = append(vals, string(r.Value))
		})
		require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	}
	return offs, vals
}

func groupsStatus(t *testing.T, c *Cluster, id uint64) kafka.CoordinatorStatus {
	t.Helper()
	n := c.Node(id)
	resp, err := n.AdminClient.Get(n.AdminBase + "/groups")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st kafka.CoordinatorStatus
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// Commits acknowledged before a kill -9 of the coordinator's server are
// there at the new coordinator; a restarted consumer resumes from them.
func TestGroupsCommitsSurviveCoordinatorKill(t *testing.T) {
	c := StartCluster(t, Options{})
	coord := c.WaitLeader(kafka.DefaultOffsetsTopic, 20*time.Second)

	want := values(scale(200), "g-")
	p, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic("s1"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range want {
		p.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) { require.NoError(t, err) })
	}
	require.NoError(t, p.Flush(ctx))
	p.Close()

	half := len(want) / 2
	offs, got := groupConsume(t, c, "it-group", half)
	require.Equal(t, int64(0), offs[0])

	st := groupsStatus(t, c, coord)
	require.True(t, st.Coordinator)
	require.Len(t, st.Groups, 1)
	require.Equal(t, int64(half), st.Groups[0].Offsets[0].Offset)
	require.Equal(t, int64(len(want)-half), st.Groups[0].Offsets[0].Lag)

	c.Kill(coord)
	next := c.WaitLeader(kafka.DefaultOffsetsTopic, 30*time.Second)
	require.NotEqual(t, coord, next)
	// The new coordinator confirms its leadership before it loads and
	// shows the groups (COORDINATOR_LOAD_IN_PROGRESS meanwhile).
	require.Eventually(t, func() bool {
		st = groupsStatus(t, c, next)
		return st.Coordinator && st.Error == 0 && len(st.Groups) == 1
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(half), st.Groups[0].Offsets[0].Offset, "the acknowledged commit survived the kill")

	offs2, got2 := groupConsume(t, c, "it-group", len(want)-half)
	require.Equal(t, int64(half), offs2[0], "resumes at the committed offset")
	require.Equal(t, want, append(got, got2...))

	// The killed server comes back and replays the offsets stream when it
	// leads it again.
	c.Restart(coord)
	c.WaitLeader("s1", 30*time.Second)
}
