package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// apis is every Kafka API VDL serves, one line each. An API lives in the
// file named by its key (00_produce.go ...), which holds its version notes
// and its registration: versions per profile, handler and request shape.
// Adding an API is one new file and one line here.
var apis = []*api{
	&produceAPI,
	&fetchAPI,
	&listOffsetsAPI,
	&metadataAPI,
	&offsetCommitAPI,
	&offsetFetchAPI,
	&findCoordinatorAPI,
	&joinGroupAPI,
	&heartbeatAPI,
	&leaveGroupAPI,
	&syncGroupAPI,
	&describeGroupsAPI,
	&listGroupsAPI,
	&saslHandshakeAPI,
	&apiVersionsAPI,
	&createTopicsAPI,
	&deleteTopicsAPI,
	&deleteRecordsAPI,
	&offsetForLeaderEpochAPI,
	&describeConfigsAPI,
	&alterConfigsAPI,
	&createPartitionsAPI,
	&incrementalAlterConfigsAPI,
	&describeClusterAPI,
	&initProducerIDAPI,
	&saslAuthenticateAPI,
}

// api is the registration of one Kafka API.
type api struct {
	key kmsg.Key
	// The versions each profile advertises; a zero versions is not served.
	modern, kafka0102 versions
	// saslOnly: advertised and served only on a SASL listener.
	saslOnly bool
	handle   handler
	// shape walks a request body of version v (see checkShape); it knows
	// versions up to shapeMax, which may be above what is served.
	shape    func(r *shapeReader, v int16)
	shapeMax int16
}

// versions is a served version range.
type versions struct {
	min, max int16
	served   bool
}

// upTo serves versions 0 to max.
func upTo(max int16) versions { return versions{0, max, true} }

// apiByKey indexes apis.
var apiByKey = func() map[int16]*api {
	m := make(map[int16]*api, len(apis))
	for _, a := range apis {
		m[a.key.Int16()] = a
	}
	return m
}()

// The keys the session itself looks at (before SASL, ApiVersions fallback).
var (
	keyApiVersions      = kmsg.ApiVersions.Int16()
	keySASLHandshake    = kmsg.SASLHandshake.Int16()
	keySASLAuthenticate = kmsg.SASLAuthenticate.Int16()
)

// ServedKeys returns the keys of every API VDL serves (in some profile),
// for metrics labelled by API.
func ServedKeys() []int16 {
	keys := make([]int16, len(apis))
	for i, a := range apis {
		keys[i] = a.key.Int16()
	}
	return keys
}
