package kafka_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

// tokenAuth is a one-step mechanism for the session's tests: the token
// "alice:pw" authenticates alice, anything else fails. Real mechanisms
// (SCRAM, PLAIN) and real clients are tested in integration/.
type tokenAuth struct{}

func (tokenAuth) Mechanisms() []string { return []string{"TOKEN"} }
func (tokenAuth) Start(mech string) (kafka.SASLExchange, error) {
	if mech != "TOKEN" {
		return nil, errors.New("no such mechanism")
	}
	return &tokenExchange{}, nil
}

type tokenExchange struct{ user string }

func (x *tokenExchange) Step(msg []byte) ([]byte, bool, error) {
	if string(msg) != "alice:pw" {
		return nil, false, errors.New("bad token")
	}
	x.user = "alice"
	return []byte("welcome"), true, nil
}
func (x *tokenExchange) User() string { return x.user }

func saslHarness(t *testing.T, profile string) *harness {
	return newHarness(t, kafka.Config{Profile: profile, SASL: tokenAuth{}})
}

func handshake(v int16, mech string) *kmsg.SASLHandshakeRequest {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.Version, r.Mechanism = v, mech
	return r
}

func authenticate(v int16, token string) *kmsg.SASLAuthenticateRequest {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.Version, r.SASLAuthBytes = v, []byte(token)
	return r
}

func TestSASLAdvertisedOnlyOnSASLListeners(t *testing.T) {
	for _, profile := range []string{kafka.ProfileModern, kafka.ProfileKafka0102} {
		keys := func(h *harness) []int16 {
			h.send(kmsg.NewPtrApiVersionsRequest())
			got := h.take()
			require.Len(t, got, 1)
			var ks []int16
			for _, k := range got[0].resp.(*kmsg.ApiVersionsResponse).ApiKeys {
				ks = append(ks, k.ApiKey)
			}
			return ks
		}
		plain := keys(newHarness(t, kafka.Config{Profile: profile}))
		require.NotContains(t, plain, int16(17), profile)
		require.NotContains(t, plain, int16(36), profile)
		secured := keys(saslHarness(t, profile))
		require.Contains(t, secured, int16(17), profile)
		require.Equal(t, profile == kafka.ProfileModern, slices.Contains(secured, int16(36)),
			"%s: SaslAuthenticate only where SaslHandshake v1 is", profile)
	}
}

func TestSASLRequiredBeforeOtherRequests(t *testing.T) {
	h := saslHarness(t, kafka.ProfileModern)
	h.send(kmsg.NewPtrMetadataRequest())
	require.Empty(t, h.take())
	require.True(t, h.out.Close)
	require.Contains(t, h.out.Reason, "before SASL authentication")
}

func TestSASLHandshakeV1AndAuthenticate(t *testing.T) {
	for v := int16(0); v <= 2; v++ {
		h := saslHarness(t, kafka.ProfileModern)
		h.send(handshake(1, "TOKEN"))
		h.send(authenticate(v, "alice:pw"))
		h.send(kmsg.NewPtrMetadataRequest())
		got := h.take()
		require.Len(t, got, 3)
		hs := got[0].resp.(*kmsg.SASLHandshakeResponse)
		require.Zero(t, hs.ErrorCode)
		require.Equal(t, []string{"TOKEN"}, hs.SupportedMechanisms)
		au := got[1].resp.(*kmsg.SASLAuthenticateResponse)
		require.Zero(t, au.ErrorCode)
		require.Equal(t, "welcome", string(au.SASLAuthBytes))
		require.Equal(t, "alice", h.s.User())
		require.False(t, h.out.Close)

		// A second handshake on an authenticated connection is refused.
		h.send(handshake(1, "TOKEN"))
		got = h.take()
		require.Len(t, got, 1)
		require.Equal(t, kerr.IllegalSaslState.Code, got[0].resp.(*kmsg.SASLHandshakeResponse).ErrorCode)
		require.True(t, h.out.Close)
	}
}

func TestSASLFailures(t *testing.T) {
	t.Run("wrong token", func(t *testing.T) {
		h := saslHarness(t, kafka.ProfileModern)
		h.send(handshake(1, "TOKEN"))
		h.send(authenticate(2, "alice:wrong"))
		got := h.take()
		require.Len(t, got, 2)
		au := got[1].resp.(*kmsg.SASLAuthenticateResponse)
		require.Equal(t, kerr.SaslAuthenticationFailed.Code, au.ErrorCode)
		require.NotNil(t, au.ErrorMessage)
		require.True(t, h.out.Close, "the connection closes after a failed authentication")
		require.Empty(t, h.s.User())
	})
	t.Run("unknown mechanism", func(t *testing.T) {
		h := saslHarness(t, kafka.ProfileModern)
		h.send(handshake(1, "GSSAPI"))
		got := h.take()
		require.Len(t, got, 1)
		hs := got[0].resp.(*kmsg.SASLHandshakeResponse)
		require.Equal(t, kerr.UnsupportedSaslMechanism.Code, hs.ErrorCode)
		require.Equal(t, []string{"TOKEN"}, hs.SupportedMechanisms)
		require.True(t, h.out.Close)
	})
	t.Run("authenticate without handshake", func(t *testing.T) {
		h := saslHarness(t, kafka.ProfileModern)
		h.send(authenticate(1, "alice:pw"))
		got := h.take()
		require.Len(t, got, 1)
		require.Equal(t, kerr.IllegalSaslState.Code, got[0].resp.(*kmsg.SASLAuthenticateResponse).ErrorCode)
		require.True(t, h.out.Close)
	})
}

// After SaslHandshake v0 (Kafka 0.10 clients) the mechanism's messages come
// as bare length-prefixed tokens and are answered the same way.
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	for _, token := range []string{"alice:pw", "alice:wrong"} {
		h := saslHarness(t, kafka.ProfileKafka0102)
		h.send(handshake(0, "TOKEN"))
		got := h.take()
		require.Len(t, got, 1)
		require.Zero(t, got[0].resp.(*kmsg.SASLHandshakeResponse).ErrorCode)
		h.s.Receive(h.now, []byte(token))
		out := h.s.Take()
		if token != "alice:pw" {
			require.True(t, out.Close)
			require.Empty(t, h.s.User())
			continue
		}
		require.False(t, out.Close)
		require.Equal(t, binary.BigEndian.AppendUint32(nil, 7), out.Data[:4])
		require.Equal(t, "welcome", string(out.Data[4:]))
		require.Equal(t, "alice", h.s.User())
		h.send(kmsg.NewPtrMetadataRequest())
		got = h.take()
		require.Len(t, got, 1, "requests are served once authenticated")
	}
}

// FuzzSASLSession: arbitrary frames on a SASL listener never panic, and no
// request other than ApiVersions and the SASL ones is answered before a
// client authenticated.
func FuzzSASLSession(f *testing.F) {
	f.Add(encodeRequest(handshake(1, "TOKEN"), 1), encodeRequest(authenticate(2, "alice:pw"), 2), encodeRequest(kmsg.NewPtrMetadataRequest(), 3))
	f.Add(encodeRequest(handshake(0, "TOKEN"), 1), []byte("alice:pw"), encodeRequest(kmsg.NewPtrMetadataRequest(), 3))
	f.Add(encodeRequest(kmsg.NewPtrApiVersionsRequest(), 1), encodeRequest(authenticate(0, "x"), 2), []byte{})
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		h := newHarness(t, kafka.Config{Profile: kafka.ProfileModern, SASL: tokenAuth{}, MaxFrameBytes: 1 << 16})
		for _, fr := range [][]byte{a, b, c} {
			wasAuthed := h.s.User() != ""
			h.s.Receive(h.now, fr)
			out := h.s.Take()
			// Before authentication only ApiVersions (18), SaslHandshake
			// (17) and SaslAuthenticate (36) are answered (or a bare
			// token, which authenticates).
			if key := int16(-1); !wasAuthed && h.s.User() == "" && len(out.Data) > 0 && len(fr) >= 2 {
				key = int16(binary.BigEndian.Uint16(fr))
				if key != 18 && key != 17 && key != 36 {
					t.Fatalf("key %d answered before authentication", key)
				}
			}
			if out.Close {
				return
			}
		}
	})
}

// Before authentication a frame may hold at most MaxPreAuthFrameBytes (as
// Kafka's sasl.server.max.receive.size): a stranger announcing more is cut
// off; once authenticated, the configured limit applies.
func TestPreAuthenticationFramesAreSmall(t *testing.T) {
	addr, _, _ := startRawServer(t, kafka.Config{SASL: tokenAuth{}})
	big := binary.BigEndian.AppendUint32(nil, kafka.MaxPreAuthFrameBytes+1)

	stranger, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer stranger.Close()
	_, err = stranger.Write(big)
	require.NoError(t, err)
	requireClosed(t, stranger)

	client, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer client.Close()
	writeFrame(t, client, encodeRequest(handshake(1, "TOKEN"), 1))
	readResponseFrame(t, client)
	writeFrame(t, client, encodeRequest(authenticate(2, "alice:pw"), 2))
	readResponseFrame(t, client)
	// A metadata request past the pre-authentication limit is served.
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 4
	for i := range 45000 {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(fmt.Sprintf("topic-%05d", i))
		md.Topics = append(md.Topics, rt)
	}
	frame := encodeRequest(md, 3)
	require.Greater(t, len(frame), kafka.MaxPreAuthFrameBytes)
	writeFrame(t, client, frame)
	require.NotEmpty(t, readResponseFrame(t, client))
}
