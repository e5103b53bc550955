package server

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// The admin APIs with a second client, sarama's ClusterAdmin (Kafka 2.4
// versions, as the modern profile advertises): DeleteRecords, configs
// (describe, incremental and whole-state alter, compact refused),
// DescribeCluster and CreatePartitions.
func TestAdminWithSarama(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 100)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0
	adm, err := sarama.NewClusterAdmin(c.brokers(), cfg)
	require.NoError(t, err)
	defer adm.Close()

	require.NoError(t, adm.DeleteRecords("s", map[int32]int64{0: 60}))
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if s.stream1().log.StartOffset() != 60 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)

	v := "3600000"
	require.NoError(t, adm.IncrementalAlterConfig(sarama.TopicResource, "s", map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}}, false))
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "s"})
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		got[e.Name] = e.Value
	}
	require.Equal(t, "3600000", got["retention.ms"])
	require.Equal(t, "delete", got["cleanup.policy"])

	compact := "compact"
	err = adm.AlterConfig(sarama.TopicResource, "s", map[string]*string{"cleanup.policy": &compact}, false)
	var aerr *sarama.AlterConfigError
	require.True(t, errors.As(err, &aerr), "%v", err)
	require.Equal(t, sarama.ErrInvalidConfig, aerr.Err)
	require.Contains(t, aerr.ErrMsg, "compact")

	brokers, _, err := adm.DescribeCluster()
	require.NoError(t, err)
	require.Len(t, brokers, 3)
	err = adm.CreatePartitions("s", 2, nil, false)
	require.ErrorIs(t, err, sarama.ErrInvalidPartitions)
}
