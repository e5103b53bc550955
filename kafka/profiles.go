package kafka

import (
	"fmt"
	"slices"
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

// The modern profile serves Kafka 2.4's versions of the keys served: the
// step up to RecordBatch v2, headers and zstd. Old versions stay served
// (down-conversion), as a real 2.4 broker does. Not further: Produce 9 /
// Fetch 12 / Metadata 10 would bring flexible encodings plus topic IDs and
// fetch-session features that VDL does not have. The kafka-0.10 profile
// serves what Kafka 0.10.2 did.
//
// Every version a profile lists is implemented field by field (see
// docs/kafka.md); the ranges are registered beside each API's handler
// (apis.go).
var profiles = map[string]*Profile{
	ProfileKafka0102: buildProfile(ProfileKafka0102, false),
	ProfileModern:    buildProfile(ProfileModern, false),
}

// buildProfile collects the ranges that profile name advertises from the
// API registrations; sasl adds the SASL keys (a SASL listener).
func buildProfile(name string, sasl bool) *Profile {
	p := &Profile{Name: name}
	for _, a := range apis {
		vs := a.modern
		if name == ProfileKafka0102 {
			vs = a.kafka0102
		}
		if !vs.served || (a.saslOnly && !sasl) {
			continue
		}
		p.APIs = append(p.APIs, VersionRange{a.key.Int16(), vs.min, vs.max})
	}
	slices.SortFunc(p.APIs, func(a, b VersionRange) int { return int(a.Key) - int(b.Key) })
	return p
}

// withSASL returns the profile with the SASL keys added.
func (p *Profile) withSASL() *Profile { return buildProfile(p.Name, true) }

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
