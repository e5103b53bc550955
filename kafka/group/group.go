// Package group is the Kafka group coordinator as a deterministic state
// machine: group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// session and rebalance timeouts), committed offsets (applied from the
// replicated offsets log), and the read views (DescribeGroups, ListGroups,
// OffsetFetch).
//
// It starts no goroutines, reads no clock and does no IO: time comes in as
// int64 nanoseconds (any monotonic origin), every iteration over groups or
// members is in a defined order (group id, member join order), and member
// ids come from the client id, a nonce given in Config and a counter. It is
// not safe for concurrent use: the owner serialises calls.
//
// The semantics follow Kafka 2.4's GroupCoordinator, static membership
// (KIP-345, group.instance.id) included; see docs/kafka.md, "Consumer
// groups".
package group

import (
	"slices"
	"strconv"
)

// ErrNone is the code of no error; the coordinator returns Kafka error
// codes (kerr) otherwise.
const ErrNone int16 = 0

// State is a group's state, named as Kafka names it (DescribeGroups).
type State string

// Group states.
const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

// Config tunes the coordinator. Durations are nanoseconds.
type Config struct {
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout (Kafka's group.min/max.session.timeout.ms): outside →
	// INVALID_SESSION_TIMEOUT. Defaults 6s and 30min (Kafka 2.4).
	MinSessionTimeout, MaxSessionTimeout int64
	// MaxMetadataBytes bounds a committed offset's metadata string
	// (offset.metadata.max.bytes): longer → OFFSET_METADATA_TOO_LARGE.
	// Default 4096.
	MaxMetadataBytes int
	// Nonce goes into every member id, so ids stay unique across restarts
	// of the coordinator (the driver passes something like its start time).
	Nonce string
	// MaxMembers bounds the members (and members pending a second join)
	// of one group (Kafka's group.max.size): a join beyond →
	// GROUP_MAX_SIZE_REACHED. Default 1000.
	MaxMembers int
	// MaxGroups bounds the groups with members: a join creating one more
	// → GROUP_MAX_SIZE_REACHED too. Default 10000.
	MaxGroups int
}

func (c Config) withDefaults() Config {
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = 6e9
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = 1800e9
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = 4096
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = 1000
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = 10000
	}
	return c
}

// Coordinator holds every group this server coordinates.
type Coordinator struct {
	cfg     Config
	groups  map[string]*Group
	offsets map[string]map[OffsetKey]Offset // by group
	nextID  uint64
}

// New returns an empty coordinator.
func New(cfg Config) *Coordinator {
	return &Coordinator{cfg: cfg.withDefaults(), groups: map[string]*Group{}, offsets: map[string]map[OffsetKey]Offset{}}
}

// Config returns the coordinator's configuration (defaults filled).
func (c *Coordinator) Config() Config { return c.cfg }

func (c *Coordinator) newMemberID(clientID string) string {
	c.nextID++
	return clientID + "-" + c.cfg.Nonce + "-" + strconv.FormatUint(c.nextID, 10)
}

func (c *Coordinator) sortedGroups() []*Group {
	ids := make([]string, 0, len(c.groups))
	for id := range c.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*Group, len(ids))
	for i, id := range ids {
		out[i] = c.groups[id]
	}
	return out
}

// liveGroups counts the groups with members or members pending.
func (c *Coordinator) liveGroups() int {
	n := 0
	for _, g := range c.groups {
		if len(g.members)+len(g.pending) > 0 {
			n++
		}
	}
	return n
}

func (c *Coordinator) group(id string, create bool) *Group {
	g := c.groups[id]
	if g == nil && create {
		g = &Group{id: id, state: Empty, pending: map[string]int64{}, static: map[string]string{}}
		c.groups[id] = g
	}
	return g
}
