package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/internal/testnet"
	"github.com/vdl-project/vdl/vfs"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	return testnet.FreeAddr(t)
}

type testCluster struct {
	t       testing.TB
	cfgs    []Config
	servers []*Server
	fss     []vfs.FS              // nil: the OS file system
	certs   string                // the cluster's certificates and admin token (pki.EnsureDir)
	csCfgs  []configserver.Config // a controlled cluster's config servers
	log     *slog.Logger          // the servers' and config servers' (testLogger)
}

func newTestCluster(t testing.TB, segment int64) *testCluster {
	return newTestClusterWith(t, func(c *Config) { c.Storage.SegmentBytes = segment })
}

func newTestClusterWith(t testing.TB, mod func(*Config)) *testCluster {
	return newTestClusterOn(t, nil, mod)
}

// newTestClusterOn runs the servers on the given file systems (nil: the OS).
func newTestClusterOn(t testing.TB, fss []vfs.FS, mod func(*Config)) *testCluster {
	c := &testCluster{t: t, fss: fss}
	var peers []Peer
	for i := 1; i <= 3; i++ {
		peers = append(peers, Peer{ID: uint64(i), Raft: freeAddr(t), Kafka: freeAddr(t), Admin: freeAddr(t)})
	}
	dir := t.TempDir()
	c.certs = filepath.Join(dir, "certs")
	require.NoError(t, pki.EnsureDir(c.certs, "test", []uint64{1, 2, 3}, nil, []string{"127.0.0.1"}, []string{"admin"}))
	_, err := pki.EnsureToken(filepath.Join(c.certs, "admin.token"))
	require.NoError(t, err)
	for _, p := range peers {
		c.cfgs = append(c.cfgs, Config{
			NodeID: p.ID, ClusterID: "test", DataDir: filepath.Join(dir, fmt.Sprint(p.ID)),
			KafkaListen: p.Kafka, RaftListen: p.Raft, AdminListen: p.Admin,
			Peers: peers, Streams: []StreamConfig{{Name: "s", ID: 1}}, InitialClusterState: "new",
			Raft: RaftConfig{TickMillis: 20},
			TLS: TLSConfig{CAFile: filepath.Join(c.certs, "ca.crt"), CertFile: filepath.Join(c.certs, fmt.Sprintf("node%d.crt", p.ID)),
				KeyFile: filepath.Join(c.certs, fmt.Sprintf("node%d.key", p.ID))},
			Admin: AdminConfig{TokenFile: filepath.Join(c.certs, "admin.token")},
		})
		mod(&c.cfgs[len(c.cfgs)-1])
	}
	c.servers = make([]*Server, 3)
	for i := range c.cfgs {
		c.start(i)
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			if s != nil {
				_ = s.Close()
			}
		}
	})
	return c
}

func (c *testCluster) start(i int) {
	if c.log == nil {
		c.log = testLogger(c.t)
	}
	var fsys vfs.FS = vfs.OS{}
	if c.fss != nil {
		fsys = c.fss[i]
	}
	s, err := newServer(c.cfgs[i], c.log.With("node", i+1), fsys)
	require.NoError(c.t, err)
	require.NoError(c.t, s.Serve(make(chan error, 2)))
	c.servers[i] = s
}

// adminClient is an HTTPS client of the admin API: with the admin token
// (token), an operator certificate (cert "operator-admin"), a node's
// certificate (cert "node1"), or nothing.
func (c *testCluster) adminClient(token bool, cert string) *http.Client {
	pool, err := pki.Pool(filepath.Join(c.certs, "ca.crt"))
	require.NoError(c.t, err)
	cfg := &tls.Config{RootCAs: pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(c.certs, cert+".crt"), filepath.Join(c.certs, cert+".key"))
		require.NoError(c.t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: cfg}
	if token {
		b, err := os.ReadFile(filepath.Join(c.certs, "admin.token"))
		require.NoError(c.t, err)
		rt = pki.Bearer{Token: strings.TrimSpace(string(b)), Next: rt}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: rt}
}

// adminPost posts to node i's admin API with the admin token.
func (c *testCluster) adminPost(i int, path string) (*http.Response, error) {
	return c.adminClient(true, "").Post("https://"+c.cfgs[i].AdminListen+path, "", nil)
}

func (c *testCluster) stop(i int) {
	require.NoError(c.t, c.servers[i].Close())
	c.servers[i] = nil
}

func (c *testCluster) leader() int {
	for i, s := range c.servers {
		if s == nil {
			continue
		}
		if l, _ := s.Host().Leader(1); l == c.cfgs[i].NodeID && s.Host().Readable(1) {
			return i
		}
	}
	return -1
}

func (c *testCluster) brokers() []string {
	var b []string
	for _, cfg := range c.cfgs {
		b = append(b, cfg.KafkaListen)
	}
	return b
}

func produceValues(t *testing.T, brokers []string, prefix string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("s"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchMaxBytes(8<<10), kgo.ProducerBatchCompression(kgo.NoCompression())) // many small entries, so segments roll
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d-%s", prefix, i, strings.Repeat("x", 200)))}, func(_ *kgo.Record, err error) {
			require.NoError(t, err)
		})
	}
	require.NoError(t, cl.Flush(ctx))
}

// TestSnapshotCatchUpOverHTTP: a server that missed data the others deleted
// by retention installs a snapshot and copies the entries from a peer over
// the admin HTTP, then converges byte for byte.
func TestSnapshotCatchUpOverHTTP(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 50)
	lag := (c.leader() + 1) % 3
	c.stop(lag)
	produceValues(t, c.brokers(), "b", 2000) // ~ 500 KiB: several 64 KiB segments
	l := c.leader()
	require.GreaterOrEqual(t, l, 0)
	hwm, _, _ := c.servers[l].Host().HighWatermark(1)
	resp, err := c.adminPost(l, fmt.Sprintf("/streams/s/retain?before=%d", hwm/2))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	// A second command makes the first one's applied index durable, so the
	// head segments can go.
	produceValues(t, c.brokers(), "c", 10)
	resp, err = c.adminPost(l, fmt.Sprintf("/streams/s/retain?before=%d", hwm/2))
	require.NoError(t, err)
	resp.Body.Close()
	first, err := c.servers[l].stream1().log.FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, uint64(10), "the leader deleted head segments")

	c.start(lag)
	produceValues(t, c.brokers(), "d", 10)
	end, _, _ := c.servers[c.leader()].Host().HighWatermark(1)
	require.Eventually(t, func() bool {
		h, _, _ := c.servers[lag].Host().HighWatermark(1)
		return h == end
	}, 30*time.Second, 50*time.Millisecond, "the lagging server catches up")
	var ref []byte
	for i, s := range c.servers {
		log := s.stream1().log
		require.Equal(t, hwm/2, log.StartOffset(), "node %d: every replica starts at the retention point", i+1)
		bs, err := log.Read(log.StartOffset(), end, 1<<30)
		require.NoError(t, err)
		var all []byte
		for _, b := range bs {
			all = append(all, b.Data...)
		}
		if ref == nil {
			ref = all
		}
		require.Equal(t, ref, all, "node %d differs", i+1)
	}
}

func (s *Server) stream1() *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGroup[1]
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "node_id"},
		{Config{NodeID: 1, DataDir: "d", KafkaListen: "x", RaftListen: "127.0.0.1:1"}, "kafka_listen"},
		{Config{NodeID: 1, DataDir: "d", KafkaListen: "127.0.0.1:1", RaftListen: "127.0.0.1:2", Profile: "kafka-9"}, "profile"},
		{Config{NodeID: 1, DataDir: "d", KafkaListen: "127.0.0.1:1", RaftListen: "127.0.0.1:2", Peers: []Peer{{ID: 2}}}, "peers must include"},
		{Config{NodeID: 1, DataDir: "d", KafkaListen: "127.0.0.1:1", RaftListen: "127.0.0.1:2", Peers: []Peer{{ID: 1}},
			Streams: []StreamConfig{{Name: "a", ID: 1, Replicas: []uint64{1, 9}}}}, "replica 9 is not a peer"},
	}
	for _, b := range bad {
		err := b.cfg.Validate()
		require.Error(t, err)
		require.Contains(t, err.Error(), b.want)
	}
	path := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("node_id = 1\nnode_idd = 2\n"), 0o644))
	_, err := LoadConfig(path)
	require.ErrorContains(t, err, "unknown keys: node_idd")
}

// TestFailStopStopsAdvertising: a server whose storage failed stops at once
// advertising leadership (metadata from it names no leader, nothing is
// readable), says so on Failed, and the others serve.
func TestFailStopStopsAdvertising(t *testing.T) {
	c := newTestCluster(t, 0)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 10)
	l := c.leader()
	s := c.servers[l]
	s.Host().FailStop(errors.New("injected: fsync failed"))
	select {
	case <-s.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("Failed is not closed after a fail-stop")
	}
	leader, _ := s.Host().Leader(1)
	require.Zero(t, leader, "a failed server names no leader")
	require.False(t, s.Host().Readable(1))
	info, ok := NewBackend(s.host, catalog{s}).Stream("s")
	require.True(t, ok)
	require.Equal(t, int32(-1), info.Leader, "metadata from a failed server names no leader")
	require.ErrorContains(t, s.Host().Err(), "injected: fsync failed")

	var others []string
	for i, cfg := range c.cfgs {
		if i != l {
			others = append(others, cfg.KafkaListen)
		}
	}
	produceValues(t, others, "b", 10)
}

// TestRetentionPolicies: the leader applies a stream's retention_bytes by
// itself, through replicated retention commands: every replica deletes the
// same head segments and starts at the same offset, and what is kept is
// what the policy asks (at least retention_bytes, at most a segment more).
func TestRetentionPolicies(t *testing.T) {
	c := newTestClusterWith(t, func(cfg *Config) {
		cfg.Storage.SegmentBytes = 64 << 10
		cfg.Storage.RetentionCheckMs = 100
		cfg.Streams[0].RetentionBytes = 256 << 10
	})
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 4000) // about 1 MiB
	var start int64
	require.Eventually(t, func() bool {
		starts := map[int64]bool{}
		for _, s := range c.servers {
			starts[s.stream1().log.StartOffset()] = true
			start = s.stream1().log.StartOffset()
		}
		return len(starts) == 1 && start > 0
	}, 20*time.Second, 50*time.Millisecond, "every replica starts at the same offset, past 0")
	l := c.servers[c.leader()].stream1().log
	kept := func() int64 {
		var n int64
		for _, sg := range l.Segments() {
			n += sg.Bytes
		}
		return n
	}
	require.Eventually(t, func() bool { return kept() < 256<<10+64<<10 }, 10*time.Second, 50*time.Millisecond,
		"about retention_bytes kept (at most a segment more): %d", kept())
	require.GreaterOrEqual(t, kept(), int64(256<<10), "at least retention_bytes kept")
	st := c.servers[0].Status() // streams by name: __consumer_offsets, s
	i := slices.IndexFunc(st.Streams, func(s StreamStatus) bool { return s.Name == "s" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, int64(256<<10), st.Streams[i].RetentionBytes)
	require.Equal(t, int64(DefaultRetentionMs), st.Streams[i].RetentionMs)
}

// TestDiskFull: the disks of all three replicas fill up. Nobody fail-stops:
// the servers refuse produces with KAFKA_STORAGE_ERROR (retriable), keep
// serving reads, and write the retention command that frees space (the
// space reserve is given up for it); then produces are accepted again by
// themselves. (Every replica used to fail-stop at once, and the retention
// command itself could not be written.)
func TestDiskFull(t *testing.T) {
	mems := []*vfs.Mem{vfs.NewMem(), vfs.NewMem(), vfs.NewMem()}
	c := newTestClusterOn(t, []vfs.FS{mems[0], mems[1], mems[2]}, func(cfg *Config) {
		cfg.DataDir = "/data"
		cfg.Storage.SegmentBytes = 64 << 10
		cfg.Storage.ReservedBytes = 128 << 10
		cfg.Streams[0].RetentionMs = -1
	})
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 500)
	for _, m := range mems {
		m.SetCapacity(1 << 40)
		free, err := m.FreeSpace("/data")
		require.NoError(t, err)
		m.SetCapacity(1<<40 - int64(free) + 1<<20) // 1 MiB left
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.DefaultProduceTopic("s"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0), kgo.RecordDeliveryTimeout(5*time.Second))
	require.NoError(t, err)
	defer cl.Close()
	var refused error
	for i := 0; i < 5000 && refused == nil; i++ {
		err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(strings.Repeat("f", 1000))}).FirstErr()
		if errors.Is(err, kerr.KafkaStorageError) {
			refused = err
		}
	}
	require.ErrorIs(t, refused, kerr.KafkaStorageError, "a full disk refuses produces with a retriable error")
	for i, s := range c.servers {
		require.NoError(t, s.Host().Err(), "node %d did not fail-stop", i+1)
	}
	// Reads go on.
	l := c.leader()
	hwm, _, _ := c.servers[l].Host().HighWatermark(1)
	bs, err := c.servers[l].stream1().log.Read(0, hwm, 1<<20)
	require.NoError(t, err)
	require.NotEmpty(t, bs)
	// Retention frees space; produces resume by themselves.
	resp, err := c.adminPost(l, fmt.Sprintf("/streams/s/retain?before=%d", hwm))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Eventually(t, func() bool {
		return cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("back")}).FirstErr() == nil
	}, 20*time.Second, 100*time.Millisecond, "produces accepted again once space is freed")
	for i, s := range c.servers {
		require.NoError(t, s.Host().Err(), "node %d did not fail-stop", i+1)
	}
}

// The admin API: reads are open; a change needs the admin token or an
// operator certificate (401 without credentials, 403 with a node's
// certificate), and a refused retention deletes nothing (one unauthenticated
// curl used to make acknowledged records unreadable on every replica).
func TestAdminChangesNeedCredentials(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 200)
	l := c.leader()
	hwm, _, _ := c.servers[l].Host().HighWatermark(1)
	retain := fmt.Sprintf("https://%s/streams/s/retain?before=%d", c.cfgs[l].AdminListen, hwm)
	post := func(cl *http.Client) (int, string) {
		resp, err := cl.Post(retain, "", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(c.adminClient(false, ""))
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.Contains(t, body, `"error"`)
	code, body = post(c.adminClient(false, "node2"))
	require.Equal(t, http.StatusForbidden, code, body)
	wrong := c.adminClient(false, "")
	wrong.Transport = pki.Bearer{Token: "not-the-token", Next: wrong.Transport}
	code, _ = post(wrong)
	require.Equal(t, http.StatusUnauthorized, code)
	for _, srv := range c.servers {
		require.Equal(t, int64(0), srv.stream1().log.StartOffset(), "nothing deleted")
	}
	// Reads need no credentials.
	resp, err := c.adminClient(false, "").Get("https://" + c.cfgs[l].AdminListen + "/status")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The token, or an operator certificate, is enough.
	code, body = post(c.adminClient(false, "operator-admin"))
	require.Equal(t, http.StatusOK, code, body)
	code, body = post(c.adminClient(true, ""))
	require.Equal(t, http.StatusOK, code, body)
}

// Idle streams hold no file descriptors of their own: their active
// segments are parked in the server's file cache (open_segments), so a
// server's descriptors do not grow with its streams; a parked stream is
// written and read again as before.
func TestIdleStreamsHoldNoDescriptors(t *testing.T) {
	const streams, openSegments = 30, 2
	c := newTestClusterWith(t, func(cfg *Config) {
		for i := 2; i <= streams; i++ { // and s, which takes the writes
			cfg.Streams = append(cfg.Streams, StreamConfig{Name: fmt.Sprintf("s%d", i), ID: uint64(i)})
		}
		cfg.Storage.OpenSegments = openSegments
	})
	segFiles := func(i int) int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		n := 0
		for _, e := range ents {
			target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
			if err == nil && strings.HasPrefix(target, c.cfgs[i].DataDir+"/") && strings.HasSuffix(target, ".seg") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 20)
	// (A server parks each stream as it opens it; the elections and the
	// produce took some back.)

	require.Eventually(t, func() bool {
		for i, s := range c.servers {
			s.parkIdle()
			if segFiles(i) > openSegments {
				return false
			}
		}
		return true
	}, 20*time.Second, 200*time.Millisecond, "idle streams parked: at most open_segments files per server")

	produceValues(t, c.brokers(), "b", 20) // stream s, parked, takes writes again
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"s": {0: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got int
	for got < 40 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		got += fs.NumRecords()
	}
	require.Equal(t, 40, got)
}
