package kafka_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/vdl-project/vdl/kafka"
)

var groupKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16}

func apiVersions(t *testing.T, profile string, v int16) *kmsg.ApiVersionsResponse {
	h := newHarness(t, kafka.Config{Profile: profile})
	r := kmsg.NewPtrApiVersionsRequest()
	r.Version = v
	r.ClientSoftwareName, r.ClientSoftwareVersion = "test", "1.0"
	h.send(r)
	got := h.take()
	require.Len(t, got, 1)
	return got[0].resp.(*kmsg.ApiVersionsResponse)
}

func TestProfilesAreCoherent(t *testing.T) {
	old := apiVersions(t, kafka.ProfileKafka0102, 0)
	require.Equal(t, int16(0), old.ErrorCode)
	vs := kversion.FromApiVersionsResponse(old)
	// Group keys included: only inter-broker keys, SaslHandshake and the
	// topic admin keys are skipped.
	require.Equal(t, "v0.10.2", vs.VersionGuess(kversion.SkipKeys(4, 5, 6, 7, 17, 19, 20)))
	for _, k := range groupKeys {
		_, ok := vs.LookupMaxKeyVersion(k)
		require.True(t, ok, "key %d", k)
	}

	modern := apiVersions(t, kafka.ProfileModern, 3)
	mv := kversion.FromApiVersionsResponse(modern)
	var absent []int16
	for k := int16(0); k < 200; k++ {
		if _, ok := mv.LookupMaxKeyVersion(k); !ok {
			absent = append(absent, k)
		}
	}
	// DescribeCluster (60) is Kafka 2.8's, served for admin clients;
	// InitProducerId goes to v4 (Kafka 2.7): v3 brought the KIP-360 epoch
	// bump fields, v4 PRODUCER_FENCED (never sent without transactions).
	later := map[int16]int16{60: 0, 22: 4}
	skip := absent
	for k := range later {
		skip = append(skip, k)
	}
	// With OffsetFetch at 6 (2.5 brought 7) the guess is exactly 2.4.
	require.Equal(t, "v2.4", mv.VersionGuess(kversion.SkipKeys(skip...)))
	for _, k := range groupKeys {
		_, ok := mv.LookupMaxKeyVersion(k)
		require.True(t, ok, "key %d", k)
	}
	// Every advertised version of the served keys is what Kafka 2.4 has
	// (the group keys with static membership, KIP-345, included).
	for _, k := range modern.ApiKeys {
		if v, ok := later[k.ApiKey]; ok {
			require.Equal(t, v, k.MaxVersion)
			continue
		}
		want, ok := kversion.V2_4_0().LookupMaxKeyVersion(k.ApiKey)
		require.True(t, ok)
		require.Equal(t, want, k.MaxVersion, "key %d", k.ApiKey)
		require.Equal(t, int16(0), k.MinVersion)
	}
	static := map[int16]int16{11: 6, 14: 4, 12: 4, 13: 4, 8: 8, 15: 5}
	for k, v := range static {
		got, _ := mv.LookupMaxKeyVersion(k)
		require.Equal(t, v, got, "key %d: static membership served", k)
	}
}

func TestTrapApiVersionsV3ResponseHeaderV0(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	r := kmsg.NewPtrApiVersionsRequest()
	r.Version = 3
	r.ClientSoftwareName, r.ClientSoftwareVersion = "sarama", "1.61"
	h.send(r)
	data := h.s.Take().Data
	// length, correlation id, then the body's error code at once: no
	// tagged-field byte in the response header.
	require.Equal(t, int32(1), int32(binary.BigEndian.Uint32(data[4:])))
	require.Equal(t, []byte{0, 0}, data[8:10])
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	require.NoError(t, resp.ReadFrom(data[8:]))
	require.NotEmpty(t, resp.ApiKeys)
}

func TestTrapApiVersionsDowngradeSameConnection(t *testing.T) {
	for _, profile := range []string{kafka.ProfileKafka0102, kafka.ProfileModern} {
		h := newHarness(t, kafka.Config{Profile: profile})
		// A version we do not serve, with a body we cannot parse.
		frame := []byte{0, 18, 0, 9, 0, 0, 0, 7, 0xff, 0xff, 0, 0xde, 0xad}
		h.s.Receive(0, frame)
		out := h.s.Take()
		require.False(t, out.Close)
		require.Equal(t, int32(7), int32(binary.BigEndian.Uint32(out.Data[4:])))
		resp := kmsg.NewPtrApiVersionsResponse() // v0 body
		require.NoError(t, resp.ReadFrom(out.Data[8:]))
		require.Equal(t, kerr.UnsupportedVersion.Code, resp.ErrorCode)
		found := false
		for _, k := range resp.ApiKeys {
			found = found || k.ApiKey == 18
		}
		require.True(t, found, "the error body lists ApiVersions' own range")
		// The client steps down on the same connection.
		r := kmsg.NewPtrApiVersionsRequest()
		h.send(r)
		got := h.take()
		require.Len(t, got, 1)
		require.Equal(t, int16(0), got[0].resp.(*kmsg.ApiVersionsResponse).ErrorCode)
		require.False(t, h.out.Close)
	}
}
