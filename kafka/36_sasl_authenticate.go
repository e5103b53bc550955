package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate v0–v2 (SASL listeners of the modern profile only: Kafka
// 0.10.2 did not have it). Each request carries the mechanism's next
// message after a SaslHandshake v1. v1's session_lifetime_ms stays 0 (no
// re-authentication, KIP-368); v2 is flexible. Without a v1 handshake →
// ILLEGAL_SASL_STATE; a failed step → SASL_AUTHENTICATION_FAILED; both
// close the connection after the answer.
var saslAuthenticateAPI = api{
	key:      kmsg.SASLAuthenticate,
	modern:   upTo(2),
	saslOnly: true,
	handle:   handleSASLAuthenticate,
	shape:    saslAuthenticateShape,
	shapeMax: 2,
}

// saslAuthenticateShape walks the request layout (checkShape).
func saslAuthenticateShape(r *shapeReader, v int16) {
	r.bytes(false)
	r.endStruct()
}

// handleSASLAuthenticate takes the next message of the exchange.
func handleSASLAuthenticate(s *Session, sl *slot, r kmsg.Request, _ int64) {
	req := r.(*kmsg.SASLAuthenticateRequest)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	if s.sasl.exchange == nil || s.sasl.raw || s.sasl.done {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate without a SaslHandshake v1 first"
		resp.ErrorMessage = &msg
		s.finish(sl, resp)
		sl.closeAfter = msg
		return
	}
	answer, done, err := s.sasl.exchange.Step(req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: " + err.Error()
		resp.ErrorMessage = &msg
		s.finish(sl, resp)
		sl.closeAfter = msg
		return
	}
	resp.SASLAuthBytes = answer
	if done {
		s.sasl.done, s.sasl.user = true, s.sasl.exchange.User()
	}
	s.finish(sl, resp)
}
