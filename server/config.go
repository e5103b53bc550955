// Package server wires a VDL server process: configuration, storage logs,
// the Raft host and its transport, the Kafka listener and the admin HTTP.
package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/vdl-project/vdl/raftnode"
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
	RaftListen     string `toml:"raft_listen"`
	AdminListen    string `toml:"admin_listen"`
	// Profile is the Kafka protocol profile: "modern" (default) or "kafka-0.10".
	Profile string `toml:"profile"`
	// DC is this server's datacenter label.
	DC string `toml:"dc"`
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

	Raft    RaftConfig    `toml:"raft"`
	Storage StorageConfig `toml:"storage"`
	Log     LogConfig     `toml:"log"`
}

// Peer is a server of the replica set (this one included).
type Peer struct {
	ID    uint64 `toml:"id"`
	Raft  string `toml:"raft"`
	Kafka string `toml:"kafka"` // advertised Kafka address
	// Admin is the peer's admin HTTP address; servers copy a snapshot's
	// entries from each other through it.
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
	// Join makes this server start the stream with an empty log that learns
	// its membership from the leader (a server being added by a membership
	// change), even where it would otherwise bootstrap it (a stream new to
	// an initialised data dir).
	Join bool `toml:"join"`
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
}

// StorageConfig tunes the storage engine.
type StorageConfig struct {
	SegmentBytes   int64 `toml:"segment_bytes"`    // default 64 MiB
	TailCacheBytes int64 `toml:"tail_cache_bytes"` // default 8 MiB per stream
	// KeepPageCache leaves closed segments in the OS page cache (by
	// default they are dropped: see storage.Options.KeepPageCache).
	KeepPageCache bool `toml:"keep_page_cache"`
	// RetentionCheckMs is how often a leader applies its streams'
	// retention policies. Default 30000.
	RetentionCheckMs int `toml:"retention_check_ms"`
	// ReservedBytes is the data dir's space reserve (storage.Space): it
	// lets segment rolls and retention go on when the disk fills, and the
	// server refuses new data while it is in use or the free space is
	// below it. Default 2 segments + 64 MiB; -1 disables.
	ReservedBytes int64 `toml:"reserved_bytes"`
}

// LogConfig sets up structured logging.
type LogConfig struct {
	Level  string `toml:"level"`  // debug, info (default), warn, error
	Format string `toml:"format"` // text (default) or json
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
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return c, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	return c, nil
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
	switch c.InitialClusterState {
	case "":
		c.InitialClusterState = "existing"
	case "new", "existing":
	default:
		errs = append(errs, fmt.Errorf("initial_cluster_state %q: want new or existing", c.InitialClusterState))
	}
	switch c.Profile {
	case "":
		c.Profile = "modern"
	case "modern", "kafka-0.10":
	default:
		errs = append(errs, fmt.Errorf("profile %q: want modern or kafka-0.10", c.Profile))
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
	if !slices.ContainsFunc(c.Streams, func(s StreamConfig) bool { return s.Name == OffsetsStreamName }) {
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
	if c.Storage.RetentionCheckMs == 0 {
		c.Storage.RetentionCheckMs = 30000
	}
	if c.Storage.ReservedBytes == 0 {
		c.Storage.ReservedBytes = 2*c.Storage.SegmentBytes + 64<<20
	}
	return errors.Join(errs...)
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
