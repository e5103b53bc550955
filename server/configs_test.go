package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Stream configs through franz-go's kadm on a 3-node cluster: describe,
// alter (incremental and whole-state, sent to whichever broker kadm picks:
// a follower forwards to the leader), replicated to every replica,
// surviving a restart, and taking effect (retention.bytes trims the
// stream, max.message.bytes refuses a larger batch); cleanup.policy=compact
// and unknown names are refused with a message; broker configs are
// described read-only; DescribeCluster lists the brokers; CreatePartitions
// is refused with INVALID_PARTITIONS.
func TestStreamConfigsWithKadm(t *testing.T) {
	c := newTestClusterWith(t, func(cfg *Config) {
		cfg.Storage.SegmentBytes = 64 << 10
		cfg.Storage.RetentionCheckMs = 100
	})
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	describe := func() map[string]*kadm.Config {
		rcs, err := adm.DescribeTopicConfigs(ctx, "s")
		require.NoError(t, err)
		rc, err := rcs.On("s", nil)
		require.NoError(t, err)
		require.NoError(t, rc.Err)
		out := map[string]*kadm.Config{}
		for _, cfg := range rc.Configs {
			out[cfg.Key] = &cfg
		}
		return out
	}
	d := describe()
	require.Equal(t, "604800000", d["retention.ms"].MaybeValue())
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, d["retention.ms"].Source)
	require.Equal(t, "delete", d["cleanup.policy"].MaybeValue())
	require.Len(t, d, 5)

	// Refused, with a message, and nothing changes.
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, "s")
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, kerr.InvalidConfig)
	require.Contains(t, res[0].ErrMessage, "never compacted")
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: kadm.StringPtr("1")}}, "s")
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, kerr.InvalidConfig)

	// Each broker in turn receives the alter (followers forward it).
	for i, cfg := range c.cfgs {
		one, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaListen))
		require.NoError(t, err)
		r, err := kadm.NewClient(one).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "preferred.dc", Value: kadm.StringPtr("dc" + string(rune('a'+i)))}}, "s")
		one.Close()
		require.NoError(t, err)
		require.NoError(t, r[0].Err, "through node %d: %s", i+1, r[0].ErrMessage)
	}
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kadm.StringPtr("262144")}}, "s")
	require.NoError(t, err)
	require.NoError(t, res[0].Err, res[0].ErrMessage)
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			cfg := s.stream1().log.Config()
			if cfg["retention.bytes"] != "262144" || cfg["preferred.dc"] != "dcc" {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every replica applied the overrides")
	d = describe()
	require.Equal(t, "262144", d["retention.bytes"].MaybeValue())
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, d["retention.bytes"].Source)

	// It takes effect: retention trims the stream to about 256 KiB.
	produceValues(t, c.brokers(), "a", 4000) // about 1 MiB
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if s.stream1().log.StartOffset() == 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "retention.bytes override applied")

	// Whole-state AlterConfigs: max.message.bytes only (the others go back
	// to their defaults), then a batch above it is refused.
	res, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2000")}}, "s")
	require.NoError(t, err)
	require.NoError(t, res[0].Err, res[0].ErrMessage)
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			cfg := s.stream1().log.Config()
			if len(cfg) != 1 || cfg["max.message.bytes"] != "2000" {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.DefaultProduceTopic("s"), kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(1), kgo.ProducerBatchCompression(kgo.NoCompression()))
	require.NoError(t, err)
	defer prod.Close()
	require.ErrorIs(t, prod.ProduceSync(ctx, &kgo.Record{Value: []byte(strings.Repeat("x", 3000))}).FirstErr(), kerr.MessageTooLarge)
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Value: []byte("small")}).FirstErr())

	// Survives a restart.
	c.stop(1)
	c.start(1)
	require.Equal(t, map[string]string{"max.message.bytes": "2000"}, c.servers[1].stream1().log.Config())

	// Broker configs, DescribeCluster, CreatePartitions.
	brcs, err := adm.DescribeBrokerConfigs(ctx, 2)
	require.NoError(t, err)
	brc, err := brcs.On("2", nil)
	require.NoError(t, err)
	require.NoError(t, brc.Err)
	found := false
	for _, cfg := range brc.Configs {
		if cfg.Key == "broker.id" {
			found = true
			require.Equal(t, "2", cfg.MaybeValue())
		}
	}
	require.True(t, found)
	dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Equal(t, "test", dc.ClusterID)
	require.Len(t, dc.Brokers, 3)
	cp, err := adm.CreatePartitions(ctx, 1, "s")
	require.NoError(t, err)
	require.ErrorIs(t, cp["s"].Err, kerr.InvalidPartitions)
	require.Contains(t, cp["s"].ErrMessage, "exactly one partition")
}

// preferred.dc takes effect: the stream's leader hands leadership to an
// in-sync replica in that DC, and it stays there.
func TestPreferredDCMovesLeadership(t *testing.T) {
	c := newTestClusterWith(t, func(cfg *Config) {
		cfg.Storage.RetentionCheckMs = 100
		cfg.DC = fmt.Sprintf("dc%d", cfg.NodeID)
		for i := range cfg.Peers {
			cfg.Peers[i].DC = fmt.Sprintf("dc%d", cfg.Peers[i].ID)
		}
	})
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	target := (c.leader() + 1) % 3
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "preferred.dc", Value: kadm.StringPtr(c.cfgs[target].DC)}}, "s")
	require.NoError(t, err)
	require.NoError(t, res[0].Err, res[0].ErrMessage)
	require.Eventually(t, func() bool { return c.leader() == target }, 20*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, target, c.leader(), "leadership stays in the preferred DC")
}

// A replica that missed a config command, which retention then deleted
// from every other log, gets the config with the snapshot it installs.
func TestConfigTravelsWithSnapshot(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	lag := (c.leader() + 1) % 3
	c.stop(lag)
	var live []string
	for i, cfg := range c.cfgs {
		if i != lag {
			live = append(live, cfg.KafkaListen)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(live...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("123456789")}}, "s")
	require.NoError(t, err)
	require.NoError(t, res[0].Err, res[0].ErrMessage)
	produceValues(t, live, "b", 2000) // several 64 KiB segments
	l := c.leader()
	cmdIndex := c.servers[l].stream1().log.ConfigIndex()
	hwm, _, _ := c.servers[l].Host().HighWatermark(1)
	for range 2 { // the second makes the first one's applied index durable
		var os kadm.Offsets
		os.AddOffset("s", 0, hwm/2, -1)
		dr, err := adm.DeleteRecords(ctx, os)
		require.NoError(t, err)
		r, _ := dr.Lookup("s", 0)
		require.NoError(t, r.Err)
		produceValues(t, live, "c", 10)
	}
	require.Eventually(t, func() bool {
		first, err := c.servers[l].stream1().log.FirstIndex()
		return err == nil && first > cmdIndex
	}, 10*time.Second, 20*time.Millisecond, "the config command is gone from the leader's log")

	c.start(lag)
	end, _, _ := c.servers[l].Host().HighWatermark(1)
	require.Eventually(t, func() bool {
		h, _, _ := c.servers[lag].Host().HighWatermark(1)
		return h >= end
	}, 30*time.Second, 50*time.Millisecond, "the lagging server catches up")
	log := c.servers[lag].stream1().log
	require.Equal(t, map[string]string{"retention.ms": "123456789"}, log.Config())
	require.Equal(t, cmdIndex, log.ConfigIndex())
	require.Equal(t, hwm/2, log.StartOffset())
}
