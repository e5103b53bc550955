package kafka

import (
	"encoding/binary"
)

// SASL authentication (a listener with Config.SASL set). Until a client
// authenticates, the session answers only ApiVersions, SaslHandshake and
// SaslAuthenticate; anything else closes the connection. SaslHandshake v1
// is followed by SaslAuthenticate requests carrying the mechanism's
// messages; after SaslHandshake v0 (Kafka 0.10 clients) the messages come
// as bare length-prefixed tokens and are answered the same way. A failed
// authentication gets SASL_AUTHENTICATION_FAILED (v1 path; the connection
// closes after the answer) or a closed connection (v0 path).

// Authenticator checks SASL credentials: the server's users.
type Authenticator interface {
	// Mechanisms lists the mechanisms offered, in order of preference.
	Mechanisms() []string
	// Start begins an exchange with one client; an unknown mechanism is
	// an error.
	Start(mechanism string) (SASLExchange, error)
}

// SASLExchange is one client's authentication.
type SASLExchange interface {
	// Step takes the client's next message and returns the server's
	// answer, done once the client is authenticated; an error means it
	// failed (the message may be shown to the client).
	Step(msg []byte) (answer []byte, done bool, err error)
	// User is the authenticated user (once done).
	User() string
}

// MaxPreAuthFrameBytes bounds a request frame before the client has
// authenticated (Kafka's sasl.server.max.receive.size): a stranger cannot
// make the server buffer 100 MiB frames.
const MaxPreAuthFrameBytes = 512 << 10

// saslState is a session's authentication.
type saslState struct {
	exchange SASLExchange // begun by a handshake
	raw      bool         // handshake v0: bare tokens follow
	done     bool
	user     string
}

// authRequired reports whether the session must authenticate first.
func (s *Session) authRequired() bool { return s.cfg.SASL != nil && !s.sasl.done }

// receiveToken handles a bare SASL token (after SaslHandshake v0): the
// answer goes back bare; a failure closes the connection.
func (s *Session) receiveToken(frame []byte) {
	answer, done, err := s.sasl.exchange.Step(frame)
	if err != nil {
		s.protocolError("SASL authentication failed: " + err.Error())
		return
	}
	if done {
		s.sasl.done, s.sasl.user = true, s.sasl.exchange.User()
	}
	sl := &slot{size: len(frame), done: true}
	sl.resp = binary.BigEndian.AppendUint32(nil, uint32(len(answer)))
	sl.resp = append(sl.resp, answer...)
	s.push(sl)
}

// User returns the authenticated SASL user ("" without SASL).
func (s *Session) User() string { return s.sasl.user }
