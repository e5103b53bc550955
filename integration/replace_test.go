package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// TestReplaceWipedServer is the disk replacement that once lost
// acknowledged writes: node 2 down, 100 records acknowledged by nodes 1 and
// 3; 1 and 3 stop; 3's data dir is wiped; 2 and 3 start. The wiped server
// no longer has the votes and the log it acknowledged with, so its peers
// refuse it: 2 and 3 elect nobody and acknowledge nothing. With 1 back,
// every acknowledged record is there, in place, and `vdlctl member replace
// 3` makes the new 3 a caught-up voter that can form a quorum again.
// The wiped server is restarted both ways an operator might: with its old
// founding configuration (initial_cluster_state = "new") and as a joining
// server ("existing").
func TestReplaceWipedServer(t *testing.T) {
	for _, state := range []string{"new", "existing"} {
		t.Run(state, func(t *testing.T) { replaceWiped(t, state) })
	}
}

func replaceWiped(t *testing.T, state string) {
	c := StartCluster(t, Options{})
	vdlctl := proccluster.Vdlctl.Path(t)
	n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
	early, acked := values(10, "early-"), values(100, "acked-")
	produceTo(t, []string{n1.Kafka, n2.Kafka, n3.Kafka}, early)
	c.Kill(2)
	produceTo(t, []string{n1.Kafka, n3.Kafka}, acked)
	c.Kill(1)
	c.Kill(3)
	c.Wipe(3, state)
	c.StartNode(2)
	c.StartNode(3)
	c.WaitHealthy(2, 20*time.Second)
	c.WaitHealthy(3, 20*time.Second)

	// Nothing may be acknowledged by 2 and the wiped 3: it lost the votes
	// and entries it acknowledged with.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		err := tryProduce([]string{n2.Kafka, n3.Kafka}, "after-wipe")
		require.Error(t, err, "a produce was acknowledged by node 2 and the wiped node 3")
	}
	assert.Eventually(t, func() bool {
		return strings.Contains(proccluster.Tail(n2.LogPath, 200), "presents data dir")
	}, 5*time.Second, 100*time.Millisecond, "node 2 says why it refuses node 3")

	// With node 1 back, every acknowledged record is there, in order.
	c.StartNode(1)
	c.WaitHealthy(1, 20*time.Second)
	c.WaitLeaderAmong("s1", 30*time.Second, 1, 2)
	all := append(append([]string{}, early...), acked...)
	require.Equal(t, all, kgoConsume(t, []string{n1.Kafka, n2.Kafka}, "s1", 0, len(all)))

	// The operator replaces the wiped server: it becomes a voter again.
	cmd := exec.Command(vdlctl, "--admin", n1.Admin, "member", "replace", "3", "--timeout", "60s")
	cmd.Env = append(os.Environ(), c.VdlctlEnv()...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "vdlctl member replace: %s", out)
	t.Logf("vdlctl member replace 3: %s", out)
	for _, stream := range []string{"s1", "__consumer_offsets"} {
		st, err := c.StreamStatus(c.WaitLeader(stream, 20*time.Second), stream)
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2, 3}, st.Voters, "%s: voters after the replacement", stream)
		assert.Empty(t, st.Learners, stream)
	}
	// The new 3 holds everything: with 2 down, 1 and 3 form the quorum.
	c.Kill(2)
	more := values(5, "more-")
	produceTo(t, []string{n1.Kafka, n3.Kafka}, more)
	all = append(all, more...)
	require.Equal(t, all, kgoConsume(t, []string{n1.Kafka, n3.Kafka}, "s1", 0, len(all)))
	c.Kill(1)
	c.Restart(2)
	c.Restart(1)
	requireEndOffset(t, c, "s1", int64(len(all)))
}

// produceTo writes vs with acks=all through the given brokers and waits
// for every acknowledgement.
func produceTo(t *testing.T, brokers []string, vs []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("s1"), kgo.RequiredAcks(kgo.AllISRAcks()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range vs {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(), "produce %s", v)
	}
}

// tryProduce makes one produce attempt with a short timeout.
func tryProduce(brokers []string, v string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("s1"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr()
}
