package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/vfs"
)

// newControlledCluster starts three config servers and three servers that
// know only them (config_servers), all on mutual TLS.
func newControlledCluster(t testing.TB, dcs ...string) (*testCluster, []*configserver.Service) {
	return newControlledClusterWith(t, nil, dcs...)
}

// controlledDownAfterMs, controlledTickMs and controlledBalanceAfterMs
// are the config servers' down_after_ms, tick_ms and balance_after_ms in
// these tests (the benchmarks run with the defaults: 0).
var controlledDownAfterMs, controlledTickMs, controlledBalanceAfterMs = 3000, 20, 1000

// newControlledClusterWith is newControlledCluster with the servers'
// configuration changed by mod (after the test defaults).
func newControlledClusterWith(t testing.TB, mod func(*Config), dcs ...string) (*testCluster, []*configserver.Service) {
	return newControlledClusterOn(t, nil, mod, dcs...)
}

// newControlledClusterOn is newControlledClusterWith with the servers'
// data dirs on the given file systems (nil: the OS's).
func newControlledClusterOn(t testing.TB, fss []vfs.FS, mod func(*Config), dcs ...string) (*testCluster, []*configserver.Service) {
	return newControlledClusterCS(t, fss, nil, mod, dcs...)
}

// newControlledClusterCS is newControlledClusterOn with the config servers'
// configuration changed by csMod; their configurations are kept in the
// cluster's csCfgs.
func newControlledClusterCS(t testing.TB, fss []vfs.FS, csMod func(*configserver.Config), mod func(*Config), dcs ...string) (*testCluster, []*configserver.Service) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	require.NoError(t, pki.EnsureDir(certs, "test", []uint64{1, 2, 3, 4}, []uint64{1, 2, 3}, []string{"127.0.0.1"}, []string{"admin"}))
	_, err := pki.EnsureToken(filepath.Join(certs, "admin.token"))
	require.NoError(t, err)
	var peers []configserver.Peer
	var apis []string
	for i := 1; i <= 3; i++ {
		p := configserver.Peer{ID: uint64(i), Raft: freeAddr(t), API: freeAddr(t)}
		peers, apis = append(peers, p), append(apis, p.API)
	}
	var svcs []*configserver.Service
	csLog := testLogger(t)
	var csCfgs []configserver.Config
	for _, p := range peers {
		cfg := configserver.Config{ID: p.ID, ClusterID: "test", DataDir: filepath.Join(dir, fmt.Sprintf("cs%d", p.ID)),
			RaftListen: p.Raft, APIListen: p.API, Peers: peers, TickMs: controlledTickMs, DownAfterMs: controlledDownAfterMs, BalanceAfterMs: controlledBalanceAfterMs,
			CAFile: filepath.Join(certs, "ca.crt"), CertFile: filepath.Join(certs, fmt.Sprintf("config%d.crt", p.ID)),
			KeyFile: filepath.Join(certs, fmt.Sprintf("config%d.key", p.ID)), TokenFile: filepath.Join(certs, "admin.token")}
		if csMod != nil {
			csMod(&cfg)
		}
		s, err := configserver.Start(cfg, csLog.With("config", p.ID))
		require.NoError(t, err)
		svcs, csCfgs = append(svcs, s), append(csCfgs, cfg)
	}
	t.Cleanup(func() {
		for _, s := range svcs {
			if s != nil {
				s.Close()
			}
		}
	})
	c := newTestClusterOn(t, fss, func(cfg *Config) {
		cfg.Peers, cfg.Streams, cfg.InitialClusterState = nil, nil, ""
		cfg.ConfigServers, cfg.ReportIntervalMs = apis, 300
		cfg.Raft.Quiesce = controlledQuiesce
		cfg.TLS = TLSConfig{CAFile: filepath.Join(certs, "ca.crt"), CertFile: filepath.Join(certs, fmt.Sprintf("node%d.crt", cfg.NodeID)),
			KeyFile: filepath.Join(certs, fmt.Sprintf("node%d.key", cfg.NodeID))}
		cfg.Admin.TokenFile = filepath.Join(certs, "admin.token")
		if len(dcs) > 0 {
			cfg.DC = dcs[int(cfg.NodeID-1)%len(dcs)]
		}
		if mod != nil {
			mod(cfg)
		}
	})
	c.certs = certs // the clients' CA and token: the config servers'
	c.csCfgs = csCfgs
	return c, svcs
}

func (c *testCluster) kafkaAddrs() []string {
	var out []string
	for _, cfg := range c.cfgs {
		out = append(out, cfg.KafkaListen)
	}
	return out
}

// Streams at runtime: kadm creates a stream through any server, it is
// placed on the three servers, produced to and consumed from, then
// deleted: every replica stops its group and removes its data.
func TestControlledCreateProduceDelete(t *testing.T) {
	c, _ := newControlledCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)

	var created kadm.CreateTopicResponses
	var why error
	require.Eventually(t, func() bool { // until the servers registered
		created, err = adm.CreateTopics(ctx, 1, 3, nil, "orders")
		if e := errors.Join(err, created["orders"].Err); fmt.Sprint(e) != fmt.Sprint(why) {
			why = e
			t.Logf("create: %v", e)
		}
		return why == nil
	}, 20*time.Second, 200*time.Millisecond)
	again, err := adm.CreateTopics(ctx, 1, 3, nil, "orders")
	require.NoError(t, err)
	require.ErrorIs(t, again["orders"].Err, kerr.TopicAlreadyExists)
	bad, err := adm.CreateTopics(ctx, 4, 3, nil, "many")
	require.NoError(t, err)
	require.ErrorIs(t, bad["many"].Err, kerr.InvalidPartitions)
	bad, err = adm.CreateTopics(ctx, 1, 2, nil, "two")
	require.NoError(t, err)
	require.ErrorIs(t, bad["two"].Err, kerr.InvalidReplicationFactor)
	bad, err = adm.CreateTopics(ctx, 1, 3, map[string]*string{"cleanup.policy": new("compact")}, "compacted")
	require.NoError(t, err)
	require.ErrorIs(t, bad["compacted"].Err, kerr.InvalidConfig)

	for i := range 20 {
		res := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, "v%d", i)})
		require.NoError(t, res.FirstErr())
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	var got []string
	for len(got) < 20 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Len(t, got, 20)
	require.Equal(t, "v0", got[0])

	md, err := adm.Metadata(ctx, "orders")
	require.NoError(t, err)
	require.Len(t, md.Topics["orders"].Partitions[0].Replicas, 3)
	group := uint64(0)
	for _, s := range c.servers {
		if st, ok := s.stream("orders"); ok {
			group = st.cfg.ID
		}
	}
	require.NotZero(t, group)

	del, err := adm.DeleteTopics(ctx, "orders")
	require.NoError(t, err)
	require.NoError(t, del["orders"].Err)
	require.Eventually(t, func() bool {
		for i, s := range c.servers {
			if _, ok := s.stream("orders"); ok {
				return false
			}
			if _, err := os.Stat(filepath.Join(c.cfgs[i].DataDir, "streams", fmt.Sprint(group))); !os.IsNotExist(err) {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "every replica stopped the group and removed its data")
	del, err = adm.DeleteTopics(ctx, "orders")
	require.NoError(t, err)
	require.ErrorIs(t, del["orders"].Err, kerr.UnknownTopicOrPartition)

	// The name can be used again: a new, empty stream.
	created, err = adm.CreateTopics(ctx, 1, 3, nil, "orders")
	require.NoError(t, err)
	require.NoError(t, created["orders"].Err)
	require.Eventually(t, func() bool {
		offs, err := adm.ListEndOffsets(ctx, "orders")
		o, _ := offs.Lookup("orders", 0)
		return err == nil && o.Err == nil && o.Offset == 0
	}, 10*time.Second, 100*time.Millisecond)
}

// The balancer: a stream's leader moved out of its preferred DC comes
// back within the balancer's delay, and the balancer says what it did.
func TestControlledBalancerReturnsLeaderToPreferredDC(t *testing.T) {
	c, svcs := newControlledCluster(t, "dc1", "dc2", "dc3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var apis []string
	for _, s := range svcs {
		apis = append(apis, s.APIAddr())
	}
	cc := configserver.NewClient(apis, true, c.adminClient(true, ""))
	require.Eventually(t, func() bool {
		_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: "orders", PreferredDC: "dc2"})
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	leaderOf := func() uint64 {
		for _, s := range c.servers {
			if st, ok := s.stream("orders"); ok {
				if l, ok := s.Host().Leader(st.cfg.ID); ok && l != 0 {
					return l
				}
			}
		}
		return 0
	}
	require.Eventually(t, func() bool { return leaderOf() == 2 }, 20*time.Second, 50*time.Millisecond, "founded with its leader in dc2")

	resp, err := c.adminPost(1, "/streams/orders/transfer-leader?to=3")
	require.NoError(t, err)
	resp.Body.Close()
	require.Eventually(t, func() bool { return leaderOf() == 3 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return leaderOf() == 2 }, 20*time.Second, 50*time.Millisecond, "the balancer brought it back")
	b, err := cc.Balancer(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, b.Done)
	last := b.Done[len(b.Done)-1]
	require.Equal(t, "orders", last.Stream)
	require.Equal(t, uint64(3), last.Leader)
	require.Equal(t, uint64(2), last.To)
	require.Contains(t, last.Reason, `preferred dc "dc2"`)
}

// addServer starts one more server of a controlled cluster, like the
// others (its certificate was made with theirs).
func (c *testCluster) addServer(id uint64) {
	cfg := c.cfgs[0]
	cfg.NodeID, cfg.DataDir = id, filepath.Join(filepath.Dir(cfg.DataDir), fmt.Sprint(id))
	cfg.KafkaListen, cfg.RaftListen, cfg.AdminListen = freeAddr(c.t), freeAddr(c.t), freeAddr(c.t)
	cfg.KafkaAdvertise, cfg.Peers = "", nil
	cfg.TLS.CertFile = filepath.Join(c.certs, fmt.Sprintf("node%d.crt", id))
	cfg.TLS.KeyFile = filepath.Join(c.certs, fmt.Sprintf("node%d.key", id))
	c.cfgs = append(c.cfgs, cfg)
	c.servers = append(c.servers, nil)
	c.start(len(c.cfgs) - 1)
}

// A DC goes down and comes back: its streams' leaders move elsewhere, the
// balancer says it cannot bring them back while no replica there is up,
// and once the DC heals every leader is back in its preferred DC.
func TestControlledDCOutageAndHeal(t *testing.T) {
	c, svcs := newControlledCluster(t, "dc1", "dc2", "dc3")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var apis []string
	for _, s := range svcs {
		apis = append(apis, s.APIAddr())
	}
	cc := configserver.NewClient(apis, true, c.adminClient(true, ""))
	names := []string{"a", "b", "c", "d"}
	for _, name := range names {
		require.Eventually(t, func() bool {
			_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: name, PreferredDC: "dc1"})
			return err == nil
		}, 20*time.Second, 200*time.Millisecond)
	}
	leaders := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, s := range c.servers {
			if s == nil {
				continue
			}
			for _, name := range names {
				if st, ok := s.stream(name); ok {
					if gs, ok := s.Host().Status(st.cfg.ID); ok && gs.Role == "StateLeader" {
						out[name] = s.cfg.NodeID
					}
				}
			}
		}
		return out
	}
	allOn := func(want func(uint64) bool) func() bool {
		return func() bool {
			l := leaders()
			for _, name := range names {
				if !want(l[name]) {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, allOn(func(id uint64) bool { return id == 1 }), 30*time.Second, 100*time.Millisecond, "founded in dc1")

	c.stop(0) // dc1 is down
	require.Eventually(t, allOn(func(id uint64) bool { return id == 2 || id == 3 }), 30*time.Second, 100*time.Millisecond,
		"leaders elsewhere")
	require.Eventually(t, func() bool {
		b, err := cc.Balancer(ctx)
		return err == nil && len(b.Refused) == len(names) && strings.Contains(b.Refused[0].Reason, `no replica in preferred dc "dc1"`)
	}, 30*time.Second, 200*time.Millisecond, "the balancer says why it waits")

	healed := time.Now()
	c.start(0)
	require.Eventually(t, allOn(func(id uint64) bool { return id == 1 }), 60*time.Second, 200*time.Millisecond,
		"every leader back in its preferred DC within 60 s of the heal")
	t.Logf("leaders back in dc1 %v after the heal", time.Since(healed).Round(100*time.Millisecond))
}

// A second client's admin calls: sarama's ClusterAdmin creates a stream
// (with configs) and deletes it through any server; an existing name and a
// second partition are refused with Kafka's errors.
func TestControlledCreateDeleteWithSarama(t *testing.T) {
	c, _ := newControlledCluster(t)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0
	adm, err := sarama.NewClusterAdmin(c.kafkaAddrs(), cfg)
	require.NoError(t, err)
	defer adm.Close()
	retention := "3600000"
	detail := &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 3, ConfigEntries: map[string]*string{"retention.ms": &retention}}
	require.Eventually(t, func() bool { return adm.CreateTopic("events", detail, false) == nil }, 20*time.Second, 200*time.Millisecond)
	var te *sarama.TopicError
	require.ErrorAs(t, adm.CreateTopic("events", detail, false), &te)
	require.Equal(t, sarama.ErrTopicAlreadyExists, te.Err)
	err = adm.CreateTopic("wide", &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 3}, false)
	require.ErrorAs(t, err, &te)
	require.Equal(t, sarama.ErrInvalidPartitions, te.Err)
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if st, ok := s.stream("events"); !ok || st.cfg.RetentionMs != 3600000 {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "hosted by all three with its retention")
	require.NoError(t, adm.DeleteTopic("events"))
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if _, ok := s.stream("events"); ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
}

// A server whose disk runs short of space while streams are created: it
// says so in its reports and is placed no new stream (a create that needs
// it fails with an error naming the disk), it opens no stream assigned
// before the config servers heard (its files would eat the reserve), and
// nobody fail-stops; once space is back, creates work again. (500 streams
// once filled this machine's disk within a minute, with the servers
// running on against it.)
func TestControlledDiskLowDuringCreates(t *testing.T) {
	mems := []*vfs.Mem{vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
	c, svcs := newControlledClusterOn(t, []vfs.FS{mems[0], mems[1], mems[2]}, func(cfg *Config) {
		cfg.DataDir = "/data"
		cfg.Storage.SegmentBytes = 64 << 10
		cfg.Storage.ReservedBytes = 1 << 20
	})
	var apis []string
	for _, s := range svcs {
		apis = append(apis, s.APIAddr())
	}
	cc := configserver.NewClient(apis, true, c.adminClient(true, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: "before"})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)

	// Server 3's disk fills: 512 KiB left, under its 1 MiB reserve.
	mems[2].SetCapacity(1 << 40)
	free, err := mems[2].FreeSpace("/data")
	require.NoError(t, err)
	mems[2].SetCapacity(1<<40 - int64(free) + 512<<10)
	require.Eventually(t, func() bool { return c.servers[2].space.Low() }, 10*time.Second, 50*time.Millisecond)

	// Assigned before the config servers heard: not opened, nothing written.
	err = c.servers[2].hostAssigned(StreamConfig{Name: "late", ID: 9999, Replicas: []uint64{1, 2, 3}})
	require.ErrorIs(t, err, errDiskLow)
	_, err = mems[2].Stat("/data/streams/9999")
	require.Error(t, err, "no files for a stream refused")

	// Creates placed on it before the config servers heard are refused
	// there (hosted by the other two); then creates fail.
	var refused error
	var during []configserver.Stream
	require.Eventually(t, func() bool {
		var st configserver.Stream
		st, refused = cc.CreateStream(ctx, configserver.StreamSpec{Name: fmt.Sprintf("during%d", len(during))})
		if refused == nil {
			during = append(during, st)
		}
		return refused != nil
	}, 10*time.Second, 100*time.Millisecond, "the config servers hear the disk is low")
	require.ErrorContains(t, refused, "short of disk space")
	for _, st := range during {
		require.NotContains(t, c.servers[2].Host().Groups(), st.Group, "%s opened on the full disk", st.Name)
	}
	cs, err := cc.Cluster(ctx)
	require.NoError(t, err)
	for _, st := range cs.Servers {
		require.Equal(t, st.ID == 3, st.DiskLow, "server %d", st.ID)
	}
	for i, s := range c.servers {
		require.NoError(t, s.Host().Err(), "server %d did not fail-stop", i+1)
	}

	// Space is back: the reserve is recreated, and creates work again.
	mems[2].SetCapacity(1 << 40)
	require.Eventually(t, func() bool {
		_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: "after"})
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.DefaultProduceTopic("after"))
	require.NoError(t, err)
	defer cl.Close()
	require.Eventually(t, func() bool {
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr() == nil
	}, 20*time.Second, 100*time.Millisecond, "the new stream takes writes")
	for _, st := range during {
		require.Eventually(t, func() bool { return slices.Contains(c.servers[2].Host().Groups(), st.Group) },
			10*time.Second, 100*time.Millisecond, "%s opened once space is back", st.Name)
	}
}

// An answer failing for thousands of streams is logged with three errors
// and a count, not thousands; errors.Is still sees the ones named.
func TestJoinFewNamesThreeAndCountsTheRest(t *testing.T) {
	require.NoError(t, joinFew([]error{nil, nil}))
	var errs []error
	for i := range 1000 {
		errs = append(errs, fmt.Errorf("stream s%d: %w", i, errDiskLow))
	}
	err := joinFew(errs)
	require.ErrorIs(t, err, errDiskLow)
	require.Equal(t, "stream s0: disk short of space\nstream s1: disk short of space\nstream s2: disk short of space\n(and 997 more)", err.Error())
	require.Equal(t, "stream s0: disk short of space", joinFew(errs[:1]).Error())
}
