package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake v0–v1 (SASL listeners only; see sasl_auth.go). The
// response lists the mechanisms offered. v0 (Kafka 0.10.2, the only
// version of the kafka-0.10 profile) is followed by bare length-prefixed
// tokens; v1 by SaslAuthenticate requests. A second handshake gets
// ILLEGAL_SASL_STATE and an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
// both close the connection after the answer.
var saslHandshakeAPI = api{
	key:       kmsg.SASLHandshake,
	modern:    upTo(1),
	kafka0102: upTo(0),
	saslOnly:  true,
	handle:    handleSASLHandshake,
	shape:     saslHandshakeShape,
	shapeMax:  1,
}

// saslHandshakeShape walks the request layout (checkShape).
func saslHandshakeShape(r *shapeReader, v int16) {
	r.str(false)
	r.endStruct()
}

// handleSASLHandshake starts the exchange with the mechanism asked for.
func handleSASLHandshake(s *Session, sl *slot, r kmsg.Request, _ int64) {
	req := r.(*kmsg.SASLHandshakeRequest)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SupportedMechanisms = s.cfg.SASL.Mechanisms()
	switch {
	case s.sasl.done || s.sasl.exchange != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		s.finish(sl, resp)
		sl.closeAfter = "SaslHandshake after the handshake"
		return
	}
	ex, err := s.cfg.SASL.Start(req.Mechanism)
	if err != nil {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		s.finish(sl, resp)
		sl.closeAfter = fmt.Sprintf("unsupported SASL mechanism %q", req.Mechanism)
		return
	}
	s.sasl.exchange, s.sasl.raw = ex, sl.version == 0
	s.finish(sl, resp)
}
