package group

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Committed offsets: the commit check and the table replayed from the
// offsets log.

// OffsetKey names a committed offset.
type OffsetKey struct {
	Group     string
	Topic     string
	Partition int32
}

// Offset is a committed offset.
type Offset struct {
	Offset      int64
	LeaderEpoch int32 // -1 when the committer gave none
	Metadata    string
	CommitTime  int64 // ms, the committer's (v1) or the coordinator's clock
	// LogOffset is where this commit sits in the offsets log: a record is
	// applied only if it is later than what is there, so replaying the log
	// and applying acknowledged commits directly commute.
	LogOffset int64
}

// CheckCommit validates an OffsetCommit's generation and member (Kafka's
// doCommitOffsets). A commit with generation < 0 to a group without
// members is a simple consumer's and is allowed (the group is created,
// Empty). A valid member's commit counts as a heartbeat.
func (c *Coordinator) CheckCommit(now int64, groupID string, generation int32, memberID string) int16 {
	g := c.group(groupID, false)
	if g == nil {
		if generation >= 0 {
			return kerr.IllegalGeneration.Code
		}
		c.group(groupID, true)
		return ErrNone
	}
	switch {
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case generation < 0 && g.state == Empty:
		return ErrNone
	case g.state == CompletingRebalance:
		return kerr.RebalanceInProgress.Code
	case !g.has(memberID):
		return kerr.UnknownMemberID.Code
	case generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	g.member(memberID).lastHeartbeat = now
	return ErrNone
}

// ApplyOffset records a committed offset found at logOffset in the offsets
// log (or acknowledged as written there). Older records than the one held
// are ignored. A nil off deletes the offset.
func (c *Coordinator) ApplyOffset(k OffsetKey, off *Offset, logOffset int64) {
	byKey := c.offsets[k.Group]
	if cur, ok := byKey[k]; ok && cur.LogOffset >= logOffset {
		return
	}
	if off == nil {
		delete(byKey, k)
		return
	}
	if byKey == nil {
		byKey = map[OffsetKey]Offset{}
		c.offsets[k.Group] = byKey
	}
	o := *off
	o.LogOffset = logOffset
	byKey[k] = o
	c.group(k.Group, true) // a group with offsets is listed (Empty)
}

// Offset returns a committed offset.
func (c *Coordinator) Offset(k OffsetKey) (Offset, bool) {
	o, ok := c.offsets[k.Group][k]
	return o, ok
}

// Offsets returns a group's committed offsets sorted by topic and partition.
func (c *Coordinator) Offsets(groupID string) []OffsetEntry {
	var out []OffsetEntry
	for k, o := range c.offsets[groupID] {
		out = append(out, OffsetEntry{OffsetKey: k, Offset: o})
	}
	slices.SortFunc(out, func(a, b OffsetEntry) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Checkpoint returns every committed offset with its log offset, in group,
// topic and partition order (what a compaction checkpoint repeats).
func (c *Coordinator) Checkpoint() []OffsetEntry {
	groups := make([]string, 0, len(c.offsets))
	for id := range c.offsets {
		groups = append(groups, id)
	}
	slices.Sort(groups)
	var out []OffsetEntry
	for _, id := range groups {
		out = append(out, c.Offsets(id)...)
	}
	return out
}

// OffsetCount is the number of committed offsets.
func (c *Coordinator) OffsetCount() int {
	n := 0
	for _, byKey := range c.offsets {
		n += len(byKey)
	}
	return n
}

// OffsetEntry is one committed offset with its key.
type OffsetEntry struct {
	OffsetKey
	Offset
}
