// Package server wires a VDL server process: configuration, storage logs,
// the Raft host and its transport, the Kafka listener and the admin HTTP.
package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"github.com/vdl-project/vdl/internal/tomlconf"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/producers"
	"github.com/vdl-project/vdl/storage"
)

// Config is a server's configuration, read from a TOML file (see
// docs/operations.md for a commented example); command-line flags override.
type Config struct {
	NodeID    uint64 `toml:"node_id"`
	ClusterID string `toml:"cluster_id"`
	DataDir   string `toml:"data_dir"`
	// Listen addresses. KafkaAdvertise is what Metadata tells clients
	// (default: KafkaListen) — advertise the address you listen on.
	KafkaListen    string `toml:"kafka_listen"`
	KafkaAdvertise string `toml:"kafka_advertise"`
	// KafkaTLSListen, if set, is a second Kafka listener, TLS with this
	// node's certificate ([tls]); peers advertise it as kafka_tls.
	KafkaTLSListen string `toml:"kafka_tls_listen"`
	RaftListen     string `toml:"raft_listen"`
	AdminListen    string `toml:"admin_listen"`
	// Profile is the Kafka protocol profile: "modern" (default) or "kafka-0.10".
	Profile string `toml:"profile"`
	// DC is this server's datacenter label; Rack its rack in the DC
	// (placement avoids two replicas of a stream on one rack).
	DC   string `toml:"dc"`
	Rack string `toml:"rack"`
	// ConfigServers are the config servers' API addresses (host:port).
	// With them the server learns its peers and streams from the config
	// servers (docs/configserver.md): peers and streams are then not
	// configured here. ReportIntervalMs is how often it reports (2000).
	ConfigServers    []string `toml:"config_servers"`
	ReportIntervalMs int      `toml:"report_interval_ms"`
	// InitialClusterState says what an empty data dir is for: "new" (this
	// server founds the cluster: its streams are bootstrapped with their
	// replica sets) or "existing" (the default: it joins a running
	// cluster; its streams start empty and wait to be added through
	// membership changes). A data dir that is already initialised ignores
	// it (docs/operations.md).
	InitialClusterState string `toml:"initial_cluster_state"`

	Peers   []Peer         `toml:"peers"`
	Streams []StreamConfig `toml:"streams"`
	// OffsetsStreamID is the Raft group id of the internal offsets stream
	// "__consumer_offsets" (committed offsets of consumer groups; its
	// leader is every group's coordinator). It is replicated on every peer
	// and added to Streams by Validate. Default DefaultOffsetsStreamID.
	OffsetsStreamID uint64 `toml:"offsets_stream_id"`
	// ProducerIDExpirationMs is how long an idempotent producer's state
	// (per stream: its epoch and last five batches) outlives its last
	// batch, measured on the stream's log clock (its batches' timestamps),
	// Kafka's producer.id.expiration.ms. Set it alike on every server.
	// Default 86400000 (1 day).
	ProducerIDExpirationMs int64 `toml:"producer_id_expiration_ms"`

	Raft    RaftConfig    `toml:"raft"`
	Storage StorageConfig `toml:"storage"`
	Moves   MovesConfig   `toml:"moves"`
	Log     LogConfig     `toml:"log"`
	TLS     TLSConfig     `toml:"tls"`
	Admin   AdminConfig   `toml:"admin"`
	SASL    SASLConfig    `toml:"sasl"`
}

// Peer is a server of the replica set (this one included).
type Peer struct {
	ID    uint64 `toml:"id"`
	Raft  string `toml:"raft"`
	Kafka string `toml:"kafka"` // advertised Kafka address
	// KafkaTLS is the advertised address of its Kafka TLS listener (what
	// clients of the TLS listener are told).
	KafkaTLS string `toml:"kafka_tls"`
	// Admin is the peer's admin HTTP address (operations on a stream are
	// redirected to its leader's).
	Admin string `toml:"admin"`
	DC    string `toml:"dc"`
}

// StreamConfig is a log stream bootstrapped from configuration.
type StreamConfig struct {
	Name     string   `toml:"name"`
	ID       uint64   `toml:"id"`       // Raft group id, unique in the cluster
	Replicas []uint64 `toml:"replicas"` // default: every peer
	// RetentionMs deletes records older than this (whole segments; by
	// record timestamp); -1 keeps them for ever. Default 7 days (Kafka's
	// retention.ms). RetentionBytes keeps at most about this much of the
	// stream (per replica); 0 or -1: no size limit. The stream's leader
	// applies them through replicated retention commands.
	RetentionMs    int64 `toml:"retention_ms"`
	RetentionBytes int64 `toml:"retention_bytes"`
	// PreferredDC is the DC its leader should be in ("" : anywhere): the
	// config servers' balancer moves it back there; a static cluster
	// reports a leader outside it (vdl_stream_leader_outside_preferred_dc).
	PreferredDC string `toml:"preferred_dc"`
	// PreferredLeader is the replica that campaigns first when the
	// stream is founded (the config servers' placement).
	PreferredLeader uint64 `toml:"-"`
	// Founders, when set (the config servers'), are the voters this
	// server bootstraps the stream with when it founds it; Replicas may
	// have changed since (a move started before this founder hosted it).
	Founders []uint64 `toml:"-"`
	// Join makes this server start the stream with an empty log that learns
	// its membership from the leader (a server being added by a membership
	// change), even where it would otherwise bootstrap it (a stream new to
	// an initialised data dir).
	Join bool `toml:"join"`
}

// bootstrapVoters are the voters a founding replica bootstraps the stream
// with: the founders the config servers recorded (the placement it was
// created with, not what moves made of it since), else the replicas.
func (sc StreamConfig) bootstrapVoters() []uint64 {
	if len(sc.Founders) > 0 {
		return sc.Founders
	}
	return sc.Replicas
}

// RaftConfig tunes replication.
type RaftConfig struct {
	TickMillis          int    `toml:"tick_ms"`        // default 100
	ElectionTicks       int    `toml:"election_ticks"` // default 10
	HeartbeatTicks      int    `toml:"heartbeat_ticks"`
	MaxUncommittedBytes uint64 `toml:"max_uncommitted_bytes"`
	// MaxEntryBytes bounds one Raft entry: one partition's record set in
	// one produce (larger: MESSAGE_TOO_LARGE). The peer transport's frame
	// limit derives from it. Default 8 MiB.
	MaxEntryBytes uint64 `toml:"max_entry_bytes"`
	SyncWrites    bool   `toml:"sync_writes"` // turn the append pipeline off (benchmarks)
	// Quiesce lets idle streams stop ticking and heartbeating (one
	// liveness heartbeat per server pair stands for them). Default true;
	// see docs/replication.md.
	Quiesce *bool `toml:"quiesce"`
	// MaxCampaigns bounds the streams whose elections this server starts
	// at once (default 512; negative: unbounded); docs/replication.md.
	MaxCampaigns int `toml:"max_campaigns"`
}

// quiesce reports whether idle groups quiesce (on unless set false).
func (r RaftConfig) quiesce() bool { return r.Quiesce == nil || *r.Quiesce }

// MovesConfig bounds what a replica move costs this server.
type MovesConfig struct {
	// CatchupBytesPerSec bounds the catch-up of learners (a replica a move
	// adds) that this server feeds as a leader (appends, paced by Raft
	// ticks) and the entries its own snapshot installs copy from peers:
	// raftnode.HostConfig.CatchupBytesPerSec. 0 (default): unbounded.
	CatchupBytesPerSec int64 `toml:"catchup_bytes_per_sec"`
}

// StorageConfig tunes the storage engine.
type StorageConfig struct {
	SegmentBytes int64 `toml:"segment_bytes"` // default 64 MiB
	// TailCacheBytes is the memory all streams share for their newest
	// records (storage.TailBudget): the most recently written keep the
	// most, up to all of it. Default a sixteenth of the machine's (or
	// cgroup's) memory, between 64 MiB and 512 MiB.
	TailCacheBytes int64 `toml:"tail_cache_bytes"`
	// KeepPageCache leaves closed segments in the OS page cache (by
	// default they are dropped: see storage.Options.KeepPageCache).
	KeepPageCache bool `toml:"keep_page_cache"`
	// CatchUpReadBytes bounds the catch-up reads (fetches served from the
	// segment files, not the tail cache) reading the disk at once, all
	// streams together (storage.ReadBudget). Default 16 MiB.
	CatchUpReadBytes int64 `toml:"catchup_read_bytes"`
	// CatchUpReadBytesPerSec paces them, all streams together. 0
	// (default): no fixed cap.
	CatchUpReadBytesPerSec int64 `toml:"catchup_read_bytes_per_sec"`
	// CatchUpReadsNoYield turns off catch-up reads yielding to writes (by
	// default they are paced while more than 1% of the logs' fdatasyncs
	// take over twice as long as without them: storage.ReadBudget).
	CatchUpReadsNoYield bool `toml:"catchup_reads_no_yield"`
	// RetentionCheckMs is how often a leader applies its streams'
	// retention policies. Default 30000.
	RetentionCheckMs int `toml:"retention_check_ms"`
	// ReservedBytes is the data dir's space reserve (storage.Space): it
	// lets segment rolls and retention go on when the disk fills, and the
	// server refuses new data while it is in use or the free space is
	// below it. Default 2 segments + 64 MiB; -1 disables.
	ReservedBytes int64 `toml:"reserved_bytes"`
	// OpenSegments bounds how many closed segments, across all streams,
	// have their files open at once (3 descriptors each; storage.FileCache):
	// descriptors then do not grow with data or stream count. Default 256.
	OpenSegments int `toml:"open_segments"`
}

// LogConfig sets up structured logging.
type LogConfig struct {
	Level  string `toml:"level"`  // debug, info (default), warn, error
	Format string `toml:"format"` // text (default) or json
}

// logLevels are the values [log] level and --log-level take.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// SlogLevel is the configured level: info when unset, an error naming the
// value and the allowed ones when unknown (a typo must not quietly log at
// another level).
func (c LogConfig) SlogLevel() (slog.Level, error) {
	if c.Level == "" {
		return slog.LevelInfo, nil
	}
	l, ok := logLevels[strings.ToLower(c.Level)]
	if !ok {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", c.Level)
	}
	return l, nil
}

// Check reports an unknown level or format.
func (c LogConfig) Check() error {
	if _, err := c.SlogLevel(); err != nil {
		return err
	}
	switch c.Format {
	case "", "text", "json":
		return nil
	}
	return fmt.Errorf("log format %q: want text or json", c.Format)
}

// DefaultRetentionMs is a stream's default retention_ms: 7 days.
const DefaultRetentionMs = 7 * 24 * 3600 * 1000

// DefaultOffsetsStreamID is the default Raft group id of the offsets stream.
const DefaultOffsetsStreamID uint64 = 1 << 62

// OffsetsStreamName is the internal stream of committed offsets.
const OffsetsStreamName = "__consumer_offsets"

// LoadConfig reads a TOML file. Unknown keys are an error, so a typo is not
// silently ignored.
func LoadConfig(path string) (Config, error) {
	var c Config
	return c, tomlconf.Load(path, &c)
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeID == 0 {
		errs = append(errs, errors.New("node_id must be set and non-zero"))
	}
	if c.ClusterID == "" {
		c.ClusterID = "vdl"
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir must be set"))
	}
	for name, addr := range map[string]string{"kafka_listen": c.KafkaListen, "raft_listen": c.RaftListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %v", name, addr, err))
		}
	}
	if c.KafkaAdvertise == "" {
		c.KafkaAdvertise = c.KafkaListen
	}
	if c.KafkaTLSListen != "" {
		if _, _, err := net.SplitHostPort(c.KafkaTLSListen); err != nil {
			errs = append(errs, fmt.Errorf("kafka_tls_listen %q: %v", c.KafkaTLSListen, err))
		}
	}
	if err := c.Log.Check(); err != nil {
		errs = append(errs, err)
	}
	switch c.InitialClusterState {
	case "":
		c.InitialClusterState = "existing"
	case "new", "existing":
	default:
		errs = append(errs, fmt.Errorf("initial_cluster_state %q: want new or existing", c.InitialClusterState))
	}
	if c.Moves.CatchupBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("[moves] catchup_bytes_per_sec %d: want a rate in bytes per second, or 0 for none", c.Moves.CatchupBytesPerSec))
	}
	switch c.Profile {
	case "":
		c.Profile = "modern"
	case "modern", "kafka-0.10":
	default:
		errs = append(errs, fmt.Errorf("profile %q: want modern or kafka-0.10", c.Profile))
	}
	if len(c.ConfigServers) > 0 {
		errs = append(errs, c.validateControlled()...)
	}
	ids := map[uint64]bool{}
	self := false
	for _, p := range c.Peers {
		if p.ID == 0 || ids[p.ID] {
			errs = append(errs, fmt.Errorf("peer id %d is zero or repeated", p.ID))
		}
		ids[p.ID] = true
		if p.ID == c.NodeID {
			self = true
		}
	}
	if !self {
		errs = append(errs, fmt.Errorf("peers must include this server (node_id %d)", c.NodeID))
	}
	if c.OffsetsStreamID == 0 {
		c.OffsetsStreamID = DefaultOffsetsStreamID
	}
	if len(c.ConfigServers) > 0 {
		// The config servers create the offsets stream.
	} else if !slices.ContainsFunc(c.Streams, func(s StreamConfig) bool { return s.Name == OffsetsStreamName }) {
		// The offsets stream is compacted by the coordinator, never aged out.
		c.Streams = append(c.Streams, StreamConfig{Name: OffsetsStreamName, ID: c.OffsetsStreamID, RetentionMs: -1})
	} else if i := slices.IndexFunc(c.Streams, func(s StreamConfig) bool { return s.Name == OffsetsStreamName }); c.Streams[i].ID != c.OffsetsStreamID || len(c.Streams[i].Replicas) != len(c.Peers) {
		errs = append(errs, fmt.Errorf("stream name %q is reserved for the offsets stream (set offsets_stream_id instead)", OffsetsStreamName))
	}
	names, gids := map[string]bool{}, map[uint64]bool{}
	for i := range c.Streams {
		s := &c.Streams[i]
		if s.Name == "" || names[s.Name] {
			errs = append(errs, fmt.Errorf("stream name %q is empty or repeated", s.Name))
		}
		if s.ID == 0 || gids[s.ID] {
			errs = append(errs, fmt.Errorf("stream %q: id %d is zero or repeated", s.Name, s.ID))
		}
		names[s.Name], gids[s.ID] = true, true
		switch {
		case s.RetentionMs == 0:
			s.RetentionMs = DefaultRetentionMs
		case s.RetentionMs < -1:
			errs = append(errs, fmt.Errorf("stream %q: retention_ms %d: want -1 (for ever) or a positive number of ms", s.Name, s.RetentionMs))
		}
		if s.RetentionBytes < -1 {
			errs = append(errs, fmt.Errorf("stream %q: retention_bytes %d: want -1 (no limit) or a positive size", s.Name, s.RetentionBytes))
		}
		if len(s.Replicas) == 0 {
			for _, p := range c.Peers {
				s.Replicas = append(s.Replicas, p.ID)
			}
		}
		slices.Sort(s.Replicas)
		for _, r := range s.Replicas {
			if !ids[r] {
				errs = append(errs, fmt.Errorf("stream %q: replica %d is not a peer", s.Name, r))
			}
		}
	}
	if c.Raft.TickMillis == 0 {
		c.Raft.TickMillis = 100
	}
	if c.ProducerIDExpirationMs == 0 {
		c.ProducerIDExpirationMs = producers.DefaultExpirationMs
	}
	if c.ProducerIDExpirationMs < 0 {
		errs = append(errs, fmt.Errorf("producer_id_expiration_ms %d: want a positive number of ms", c.ProducerIDExpirationMs))
	}
	if c.Raft.MaxEntryBytes == 0 {
		c.Raft.MaxEntryBytes = raftnode.DefaultMaxEntryBytes
	}
	if c.Raft.MaxEntryBytes < 64<<10 || c.Raft.MaxEntryBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("raft.max_entry_bytes %d: want 64 KiB to 1 GiB", c.Raft.MaxEntryBytes))
	}
	if c.Raft.MaxUncommittedBytes != 0 && c.Raft.MaxUncommittedBytes < c.Raft.MaxEntryBytes {
		errs = append(errs, fmt.Errorf("raft.max_uncommitted_bytes %d is below max_entry_bytes %d: an entry could never be proposed",
			c.Raft.MaxUncommittedBytes, c.Raft.MaxEntryBytes))
	}
	if c.Storage.SegmentBytes == 0 {
		c.Storage.SegmentBytes = 64 << 20
	}
	if c.Storage.TailCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("storage.tail_cache_bytes %d is negative", c.Storage.TailCacheBytes))
	}
	if c.Storage.TailCacheBytes == 0 {
		c.Storage.TailCacheBytes = defaultTailBudget()
	}
	if c.Storage.CatchUpReadBytes < 0 || c.Storage.CatchUpReadBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("storage.catchup_read_bytes %d or catchup_read_bytes_per_sec %d is negative",
			c.Storage.CatchUpReadBytes, c.Storage.CatchUpReadBytesPerSec))
	}
	if c.Storage.CatchUpReadBytes == 0 {
		c.Storage.CatchUpReadBytes = storage.DefaultCatchUpReadBytes
	}
	if c.Storage.RetentionCheckMs == 0 {
		c.Storage.RetentionCheckMs = 30000
	}
	if c.Storage.ReservedBytes == 0 {
		c.Storage.ReservedBytes = 2*c.Storage.SegmentBytes + 64<<20
	}
	if c.Storage.OpenSegments < 0 {
		errs = append(errs, fmt.Errorf("storage.open_segments %d is negative", c.Storage.OpenSegments))
	}
	if c.Storage.OpenSegments == 0 {
		c.Storage.OpenSegments = 256
	}
	errs = append(errs, c.validateSecurity()...)
	errs = append(errs, c.validateSASL()...)
	return errors.Join(errs...)
}

// validateControlled checks a server of the config servers: it knows
// itself, not its peers or streams.
func (c *Config) validateControlled() []error {
	var errs []error
	if len(c.Streams) > 0 {
		errs = append(errs, errors.New("streams: with config_servers, streams are created through the config servers (vdlctl stream create), not configured"))
	}
	for _, a := range c.ConfigServers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("config_servers %q: %v", a, err))
		}
	}
	if c.ReportIntervalMs <= 0 {
		c.ReportIntervalMs = 2000
	}
	if len(c.Peers) == 0 {
		c.Peers = []Peer{{ID: c.NodeID, Raft: c.RaftListen, Kafka: c.KafkaAdvertise, KafkaTLS: c.KafkaTLSListen, Admin: c.AdminListen, DC: c.DC}}
	}
	return errs
}

// Peer returns the peer with id.
func (c *Config) Peer(id uint64) (Peer, bool) {
	for _, p := range c.Peers {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}
