package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/clienttest"
)

// TestGroupTakeoverOnCluster: two members of one group on a real 3-node
// cluster; exactly one receives (one partition); when it dies without
// leaving, the other takes over from the committed offset within the
// session timeout.
func TestGroupTakeoverOnCluster(t *testing.T) {
	c := StartCluster(t, Options{})
	c.WaitLeader("s1", 20*time.Second)
	want := values(60, "to-")
	produceValues(t, c, want[:30])
	opts := []kgo.Opt{kgo.SeedBrokers(c.KafkaAddrs()...), kgo.ConsumerGroup("takeover"), kgo.ConsumeTopics("s1"),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond), // 6 s: the broker minimum, as Kafka's
		kgo.RebalanceTimeout(5 * time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Balancers(kgo.RangeBalancer())}
	clienttest.Takeover{
		A: clienttest.NewMember(t, opts...), B: clienttest.NewMember(t, opts...),
		First: 30, Total: 60,
		ProduceRest: func() { produceValues(t, c, want[30:]) },
		CommitWait:  500 * time.Millisecond,
		Within:      20 * time.Second,
		Timeout:     60 * time.Second,
	}.Run(t)
}
