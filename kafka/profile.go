package kafka

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Profile names.
const (
	ProfileModern    = "modern"     // default: RecordBatch v2, like Kafka 2.4 for the keys served
	ProfileKafka0102 = "kafka-0.10" // a broker that looks like Kafka 0.10.2 (MessageSet v0/v1)
)

// VersionRange is one API key and the versions served for it.
type VersionRange struct {
	Key, Min, Max int16
}

// Profile is the coherent set of API versions a server advertises.
type Profile struct {
	Name string
	APIs []VersionRange // sorted by key
}

// Range returns the versions served for key.
func (p *Profile) Range(key int16) (VersionRange, bool) {
	i, ok := slices.BinarySearchFunc(p.APIs, key, func(r VersionRange, k int16) int { return int(r.Key) - int(k) })
	if !ok {
		return VersionRange{}, false
	}
	return p.APIs[i], true
}

// Supports reports whether key at version is served.
func (p *Profile) Supports(key, version int16) bool {
	r, ok := p.Range(key)
	return ok && version >= r.Min && version <= r.Max
}

var (
	keyProduce     = (&kmsg.ProduceRequest{}).Key()
	keyFetch       = (&kmsg.FetchRequest{}).Key()
	keyListOffsets = (&kmsg.ListOffsetsRequest{}).Key()
	keyMetadata    = (&kmsg.MetadataRequest{}).Key()
	keyApiVersions = (&kmsg.ApiVersionsRequest{}).Key()
)

// Every version listed here is implemented field by field (see
// docs/kafka.md). A new key needs its range here, its handler in the
// handlers table (session.go) and its grammar in checkShape (shape.go).
var profiles = map[string]*Profile{
	ProfileKafka0102: newProfile(ProfileKafka0102, []VersionRange{
		{keyProduce, 0, 2},
		{keyFetch, 0, 3},
		{keyListOffsets, 0, 1},
		{keyMetadata, 0, 2},
		{keyApiVersions, 0, 0},
		{keyFindCoordinator, 0, 0},
		{keyJoinGroup, 0, 1},
		{keySyncGroup, 0, 0},
		{keyHeartbeat, 0, 0},
		{keyLeaveGroup, 0, 0},
		{keyOffsetCommit, 0, 2},
		{keyOffsetFetch, 0, 1},
		{keyDescribeGroups, 0, 0},
		{keyListGroups, 0, 0},
	}),
	// Kafka 2.4's versions of the keys served: the step up to RecordBatch
	// v2, headers and zstd. Old versions stay served (down-conversion), as a
	// real 2.4 broker does. Not further: Produce 9 / Fetch 12 / Metadata 10
	// would bring flexible encodings plus topic IDs and fetch-session
	// features that VDL does not have.
	ProfileModern: newProfile(ProfileModern, []VersionRange{
		{keyProduce, 0, 8},
		{keyFetch, 0, 11},
		{keyListOffsets, 0, 5},
		{keyMetadata, 0, 9},
		{keyApiVersions, 0, 3},
		// Group keys: Kafka 2.4's versions up to static membership
		// (KIP-345: group.instance.id in JoinGroup 5, SyncGroup 3,
		// Heartbeat 3, LeaveGroup 3, OffsetCommit 7, DescribeGroups 4),
		// which VDL does not implement; FindCoordinator, OffsetFetch and
		// ListGroups are at 2.4's maximum.
		{keyFindCoordinator, 0, 3},
		{keyJoinGroup, 0, 4},
		{keySyncGroup, 0, 2},
		{keyHeartbeat, 0, 2},
		{keyLeaveGroup, 0, 2},
		{keyOffsetCommit, 0, 6},
		{keyOffsetFetch, 0, 6},
		{keyDescribeGroups, 0, 3},
		{keyListGroups, 0, 3},
	}),
}

func newProfile(name string, apis []VersionRange) *Profile {
	slices.SortFunc(apis, func(a, b VersionRange) int { return int(a.Key) - int(b.Key) })
	return &Profile{Name: name, APIs: apis}
}

// ProfileByName returns a profile; "" means modern.
func ProfileByName(name string) (*Profile, error) {
	if name == "" {
		name = ProfileModern
	}
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("kafka: unknown protocol profile %q (want %q or %q)", name, ProfileModern, ProfileKafka0102)
	}
	return p, nil
}
