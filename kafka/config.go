package kafka

import (
	"fmt"
	"time"

	"github.com/vdl-project/vdl/kafka/group"
)

// Config configures the Kafka front end. Zero fields take the defaults.
type Config struct {
	// Profile: ProfileModern (default) or ProfileKafka0102.
	Profile string
	// ClusterID is reported in Metadata v2+ ("" reports null).
	ClusterID string
	// MaxFrameBytes bounds one request frame (Kafka's
	// socket.request.max.bytes). Default 100 MiB. A longer frame closes
	// the connection before anything is allocated for it.
	MaxFrameBytes int
	// MaxMessageBytes bounds one record batch (one legacy message) in a
	// produce: larger → MESSAGE_TOO_LARGE. Default DefaultMaxMessageBytes.
	// A stream's max.message.bytes (its replicated config) may lower it.
	MaxMessageBytes int
	// MaxRecordSetBytes bounds one partition's record set in one produce,
	// which becomes one Raft entry: larger → MESSAGE_TOO_LARGE. Default
	// DefaultMaxRecordSetBytes (a server sets it from its max_entry_bytes).
	MaxRecordSetBytes int
	// MaxConnections bounds open client connections, MaxConnectionsPerIP
	// those from one address (Kafka's max.connections.per.ip); more are
	// accepted and closed at once with a log line. Defaults 10000 and 1000.
	MaxConnections      int
	MaxConnectionsPerIP int
	// MaxRequestBytes bounds, across all connections, the bytes of
	// requests being read or read and not yet answered (Kafka's
	// queued.max.request.bytes): at the bound connections wait (their
	// sockets are not read) until requests are answered. Default 256 MiB.
	MaxRequestBytes int
	// FetchMaxBytes caps a fetch response whatever the request asks, in
	// every version (Kafka's fetch.max.bytes). Default 55 MiB.
	FetchMaxBytes int
	// IdleTimeout closes a connection that sends no request for that long
	// (Kafka's connections.max.idle.ms); RequestReadTimeout one that takes
	// longer to send the rest of a request it started. Defaults 10 minutes
	// and 30 seconds.
	IdleTimeout        time.Duration
	RequestReadTimeout time.Duration
	// MaxInFlightRequests and MaxInFlightBytes bound, per connection, the
	// requests read but not yet answered (and their bytes, plus response
	// bytes not yet written). At the bound the server stops reading the
	// socket until responses go out. Defaults 256 and 64 MiB.
	MaxInFlightRequests int
	MaxInFlightBytes    int
	// DefaultProduceTimeout applies when a produce request carries a
	// timeout ≤ 0. Default 30s.
	DefaultProduceTimeout time.Duration
	// WriteTimeout bounds one write of responses to a client that does not
	// read. Default 2 minutes.
	WriteTimeout time.Duration
	// ShutdownGrace is how long Close lets connections finish answering
	// requests already read. Default 5s.
	ShutdownGrace time.Duration

	// Observer, if set, is told every request's timing and the
	// connections opened and closed (metrics).
	Observer Observer

	// SASL, if set, makes clients authenticate first (sasl_auth.go); the
	// listener then offers SaslHandshake and SaslAuthenticate.
	SASL Authenticator
	// Brokers, if set, is what this listener advertises instead of the
	// Backend's brokers (a TLS listener advertises the TLS addresses).
	Brokers func() []Broker

	// OffsetsTopic is the internal stream holding committed offsets; its
	// leader coordinates every group. Default "__consumer_offsets".
	OffsetsTopic string
	// OffsetCommitTimeout bounds the wait for an offset commit's Raft
	// commit (then REQUEST_TIMED_OUT). Default 5s (Kafka's
	// offsets.commit.timeout.ms).
	OffsetCommitTimeout time.Duration
	// GroupMinSessionTimeout and GroupMaxSessionTimeout bound members'
	// session timeouts. Defaults 6s and 30min (Kafka 2.4).
	GroupMinSessionTimeout, GroupMaxSessionTimeout time.Duration

	// ForwardProducerIDs, if set, asks the offsets stream's leader (a
	// broker id) for a block of producer ids (its
	// ProducerIDs.AllocateBlock) when this server does not lead the
	// stream; done gets the block's first id. Without it, InitProducerId
	// on another server than that leader is answered
	// COORDINATOR_NOT_AVAILABLE.
	ForwardProducerIDs func(leader int32, done func(first int64, err error))
}

func (c Config) groupsConfig() GroupsConfig {
	return GroupsConfig{OffsetsTopic: c.OffsetsTopic, Group: group.Config{
		MinSessionTimeout: int64(c.GroupMinSessionTimeout),
		MaxSessionTimeout: int64(c.GroupMaxSessionTimeout),
	}, ForwardProducerIDs: c.ForwardProducerIDs}
}

// DefaultMaxFrameBytes is the default MaxFrameBytes.
const DefaultMaxFrameBytes = 100 << 20

// DefaultMaxRecordSetBytes is the default MaxRecordSetBytes: one byte under
// raftnode.DefaultMaxEntryBytes (8 MiB), the largest default Raft entry
// (server tests check that the two agree).
const DefaultMaxRecordSetBytes = 8<<20 - 1

func (c Config) withDefaults() (Config, *Profile, error) {
	p, err := ProfileByName(c.Profile)
	if err != nil {
		return c, nil, err
	}
	c.Profile = p.Name
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxFrameBytes, DefaultMaxFrameBytes)
	def(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	def(&c.MaxRecordSetBytes, DefaultMaxRecordSetBytes)
	c.MaxMessageBytes = min(c.MaxMessageBytes, c.MaxRecordSetBytes)
	def(&c.MaxConnections, 10000)
	def(&c.MaxConnectionsPerIP, 1000)
	def(&c.MaxRequestBytes, 256<<20)
	def(&c.FetchMaxBytes, 55<<20)
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.RequestReadTimeout == 0 {
		c.RequestReadTimeout = 30 * time.Second
	}
	def(&c.MaxInFlightRequests, 256)
	def(&c.MaxInFlightBytes, 64<<20)
	if c.DefaultProduceTimeout == 0 {
		c.DefaultProduceTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 2 * time.Minute
	}
	if c.OffsetsTopic == "" {
		c.OffsetsTopic = DefaultOffsetsTopic
	}
	if c.OffsetCommitTimeout == 0 {
		c.OffsetCommitTimeout = 5 * time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.MaxFrameBytes < 64 || c.MaxMessageBytes < 64 || c.MaxConnections < 0 || c.MaxConnectionsPerIP < 0 ||
		c.MaxInFlightRequests < 1 || c.MaxInFlightBytes < 1 || c.MaxRequestBytes < 1 || c.FetchMaxBytes < 1 {
		return c, nil, fmt.Errorf("kafka: invalid limits in config %+v", c)
	}
	return c, p, nil
}

// DefaultMaxMessageBytes is Kafka's default message.max.bytes.
const DefaultMaxMessageBytes = 1048588
