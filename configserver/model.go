// Package configserver is VDL's control plane: a 3-node Raft group whose
// replicated state (servers, streams, the history of operations) lives in
// bbolt, and the management API its leader serves. Servers register and
// report to it; it places new streams on servers (DC- and rack-aware), tells
// each server which streams to host or delete, and answers the Kafka
// front ends' CreateTopics and DeleteTopics. See docs/configserver.md.
//
// The state machine (State.Apply) is deterministic: a command carries
// everything that was decided when it was proposed (the placement, the
// leader's clock), so every replica applies it to the same state.
package configserver

import (
	"fmt"
	"regexp"
	"slices"
)

// Server is a registered data server.
type Server struct {
	ID       uint64 `json:"id"`
	Kafka    string `json:"kafka"`               // advertised Kafka address
	KafkaTLS string `json:"kafka_tls,omitempty"` // advertised Kafka TLS address
	Raft     string `json:"raft"`
	Admin    string `json:"admin"`
	DC       string `json:"dc,omitempty"`
	Rack     string `json:"rack,omitempty"`
	// DirID is its data dir's id: a stream placed on it is founded by
	// that dir; a server back with another dir (a replaced disk) joins
	// the stream instead of founding it again (docs/operations.md).
	DirID uint64 `json:"dir_id"`
	// State is "active", or "draining" (no new replicas are placed on it).
	State      string `json:"state"`
	Registered int64  `json:"registered_ms"` // the leader's clock when it registered
}

// Server states.
const (
	ServerActive   = "active"
	ServerDraining = "draining"
)

// Stream is a log stream: one Raft group.
type Stream struct {
	Name     string   `json:"name"`
	Group    uint64   `json:"group"`
	Replicas []uint64 `json:"replicas"` // the first is the preferred leader
	// Dirs are the replicas' data dir ids when the stream was created:
	// the dirs that found it.
	Dirs []uint64 `json:"dirs"`
	// Founders are the replicas it was created on, sorted: the voters
	// every founding replica bootstraps its group with, whenever it
	// comes to host it (Replicas changes with moves; a founder that
	// hosts the stream late must still found the same group).
	Founders []uint64 `json:"founders,omitempty"`
	// Former are the servers that were replicas and left it (a move's
	// source once done, a cancelled move's target): no move takes the
	// stream back to one (FormerReplica) until it is released
	// (ReleasedFormers).
	Former []uint64 `json:"former,omitempty"`
	// PreferredDC is where its leader should be ("" : anywhere).
	PreferredDC    string `json:"preferred_dc,omitempty"`
	RetentionMs    int64  `json:"retention_ms"`
	RetentionBytes int64  `json:"retention_bytes"`
	// State is "active", or "deleting" until every replica stopped it.
	State   string `json:"state"`
	Created int64  `json:"created_ms"`
}

// Stream states.
const (
	StreamActive   = "active"
	StreamDeleting = "deleting"
)

// Op is one entry of the history of operations.
type Op struct {
	Index  uint64 `json:"index"` // the command's position in the log
	At     int64  `json:"at_ms"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// StreamSpec is what a create asks for.
type StreamSpec struct {
	Name              string `json:"name"`
	ReplicationFactor int    `json:"replication_factor"` // 3 (default) or 5
	PreferredDC       string `json:"preferred_dc,omitempty"`
	RetentionMs       *int64 `json:"retention_ms,omitempty"`    // default 7 days
	RetentionBytes    *int64 `json:"retention_bytes,omitempty"` // default none (-1)
}

// StreamChange is what an alter asks for (nil: unchanged).
type StreamChange struct {
	PreferredDC    *string `json:"preferred_dc,omitempty"`
	RetentionMs    *int64  `json:"retention_ms,omitempty"`
	RetentionBytes *int64  `json:"retention_bytes,omitempty"`
}

// DefaultRetentionMs is a stream's default retention: 7 days, Kafka's.
const DefaultRetentionMs = 7 * 24 * 3600 * 1000

// OffsetsStream is the internal stream of consumer groups' offsets, which
// the config server creates once three servers registered; its group id
// is the one static clusters use too.
const (
	OffsetsStream      = "__consumer_offsets"
	OffsetsGroup       = uint64(1) << 62
	firstStreamGroupID = 1
)

// topicName is Kafka's rule for topic names (kafka.common.internals.Topic).
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateName checks a stream name like Kafka checks a topic name.
func ValidateName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: stream name %q is not allowed", ErrInvalid, name)
	case !topicName.MatchString(name):
		return fmt.Errorf("%w: stream name %q: use at most 249 of a-z, A-Z, 0-9, '.', '_' and '-'", ErrInvalid, name)
	case len(name) > 2 && name[:2] == "__":
		return fmt.Errorf("%w: stream name %q: names starting with __ are internal", ErrInvalid, name)
	}
	return nil
}

// Validate checks a create request and fills its defaults.
func (s *StreamSpec) Validate() error {
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	switch s.ReplicationFactor {
	case 0:
		s.ReplicationFactor = 3
	case 3, 5:
	default:
		return fmt.Errorf("%w: replication factor %d: VDL streams have 3 or 5 replicas", ErrInvalid, s.ReplicationFactor)
	}
	if s.RetentionMs == nil {
		s.RetentionMs = new(int64(DefaultRetentionMs))
	}
	if s.RetentionBytes == nil {
		s.RetentionBytes = new(int64(-1))
	}
	return checkRetention(*s.RetentionMs, *s.RetentionBytes)
}

func checkRetention(ms, bytes int64) error {
	if ms < -1 || ms == 0 {
		return fmt.Errorf("%w: retention_ms %d: want a positive duration or -1 (keep for ever)", ErrInvalid, ms)
	}
	if bytes < -1 {
		return fmt.Errorf("%w: retention_bytes %d: want a size or -1 (no limit)", ErrInvalid, bytes)
	}
	return nil
}

// FoundingVoters are the voters a founding replica bootstraps the
// stream's group with: its founders; for a stream recorded before
// Founders, the replicas that founded it (a data dir recorded).
func (st Stream) FoundingVoters() []uint64 {
	if len(st.Founders) > 0 {
		return slices.Clone(st.Founders)
	}
	var out []uint64
	for i, id := range st.Replicas {
		if i < len(st.Dirs) && st.Dirs[i] != 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// FormerReplica refuses a move of the stream to a server that was a
// replica and left it. Such a server rejoins the group with an empty log
// under the identity the other replicas know it by: a replica that missed
// its removal (partitioned, with an older membership) could win its vote
// — its log, and what it acknowledged, forgotten — and overwrite committed
// entries. The simulator found it (seed 28 with -sim.controlplane and more
// cancels). A former replica is released (formers.go) once its copy is
// gone and no replica's membership counts it any more.
func (st Stream) FormerReplica(id uint64) error {
	if slices.Contains(st.Former, id) {
		return fmt.Errorf("%w: server %d was a replica of %s and left it: a stream does not move back to a server it left "+
			"until its copy is gone and no replica's membership counts it (it would rejoin with an empty log that a stale replica could count): "+
			"retry once the config servers released it (vdlctl ops: former-released), or choose another server", ErrInvalid, id, st.Name)
	}
	return nil
}
