package kafka

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Stream configs: what DescribeConfigs (32), AlterConfigs (33) and
// IncrementalAlterConfigs (44) serve for a topic resource. A stream's
// config is the server's defaults (its TOML) with overrides that live in
// the stream's own Raft log (Backend.AlterStreamConfig), so every replica
// holds the same ones and they survive restarts and retention.
const (
	ConfigRetentionMs    = "retention.ms"
	ConfigRetentionBytes = "retention.bytes"
	ConfigCleanupPolicy  = "cleanup.policy"
	ConfigMaxMessage     = "max.message.bytes"
	ConfigPreferredDC    = "preferred.dc" // VDL's: the datacenter the stream's leader should be in
)

// StreamConfigNames are the stream configs served, in the order described.
var StreamConfigNames = []string{ConfigCleanupPolicy, ConfigMaxMessage, ConfigPreferredDC, ConfigRetentionBytes, ConfigRetentionMs}

// configError is a resource's error code and message.
type configError struct {
	code int16
	msg  string
}

func (e *configError) Error() string { return e.msg }

func invalidConfig(format string, args ...any) *configError {
	return &configError{kerr.InvalidConfig.Code, fmt.Sprintf(format, args...)}
}

// checkStreamConfig validates one value set on a stream config.
func checkStreamConfig(name, value string) *configError {
	intIn := func(lo, hi int64) *configError {
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil || n < lo || n > hi {
			return invalidConfig("%s must be an integer in [%d, %d], got %q", name, lo, hi, value)
		}
		return nil
	}
	switch name {
	case ConfigRetentionMs, ConfigRetentionBytes:
		return intIn(-1, math.MaxInt64)
	case ConfigMaxMessage:
		return intIn(0, math.MaxInt32)
	case ConfigCleanupPolicy:
		for p := range strings.SplitSeq(value, ",") {
			switch strings.TrimSpace(p) {
			case "delete":
			case "compact":
				return invalidConfig("cleanup.policy=%s is not supported: VDL streams are never compacted, only trimmed by retention (cleanup.policy=delete)", value)
			default:
				return invalidConfig("cleanup.policy must be delete, got %q", value)
			}
		}
		return nil
	case ConfigPreferredDC:
		if len(value) > 255 {
			return invalidConfig("preferred.dc is at most 255 bytes")
		}
		return nil
	}
	return invalidConfig("unknown or unsupported topic config %q (VDL serves %s)", name, strings.Join(StreamConfigNames, ", "))
}

// topicConfigTarget checks a topic resource named name for an alter: the
// stream exists and is not the internal offsets stream.
func (s *Session) topicConfigTarget(name string) *configError {
	if !s.be.HasStream(name) {
		return &configError{kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("no stream %q", name)}
	}
	if name == s.cfg.OffsetsTopic {
		return &configError{kerr.InvalidTopicException.Code, "the internal offsets stream's config cannot be altered"}
	}
	return nil
}

// alterResource is one resource of an AlterConfigs or
// IncrementalAlterConfigs, resolved: the changes to propose, or an error.
type alterResource struct {
	err     *configError
	stream  string
	reset   bool
	changes []ConfigChange
}

// alterOp is an (Incremental)AlterConfigs waiting for its config commands.
type alterOp struct {
	sl      *slot
	resp    kmsg.Response
	setErr  func(i int, code int16, msg *string)
	dl      int64
	pending map[ProduceToken]int // token → resource index
}

// startAlters proposes each valid resource's changes (unless validateOnly)
// and answers the others; resp is finished once every command is done.
func (s *Session) startAlters(sl *slot, resp kmsg.Response, setErr func(int, int16, *string), rs []alterResource, validateOnly bool, now int64) {
	op := &alterOp{sl: sl, resp: resp, setErr: setErr, dl: now + int64(s.cfg.DefaultProduceTimeout), pending: map[ProduceToken]int{}}
	for i, r := range rs {
		if r.err != nil {
			setErr(i, r.err.code, &r.err.msg)
			continue
		}
		if validateOnly {
			continue
		}
		s.nextToken++
		tok, notify := s.nextToken, s.notify
		op.pending[tok] = i
		s.produces[tok] = op
		s.be.AlterStreamConfig(r.stream, r.reset, r.changes, func(err error) { notify(Completion{Token: tok, Err: err}) })
	}
	if len(op.pending) == 0 {
		s.finish(sl, resp)
		return
	}
	sl.op = op
}

func (op *alterOp) complete(s *Session, c Completion, _ int64) {
	i, ok := op.pending[c.Token]
	if !ok || op.sl.done {
		return
	}
	delete(op.pending, c.Token)
	if c.Err != nil {
		msg := c.Err.Error()
		op.setErr(i, errorCode(c.Err, 0), &msg)
	}
	if len(op.pending) == 0 {
		s.finish(op.sl, op.resp)
	}
}

func (op *alterOp) poll(s *Session, now int64) {
	if op.sl.done || now < op.dl {
		return
	}
	op.abandon(s)
	s.finish(op.sl, op.resp)
}

// abandon forgets the outstanding commands; their resources answer
// REQUEST_TIMED_OUT (the command may still apply).
func (op *alterOp) abandon(s *Session) {
	idx := make([]int, 0, len(op.pending))
	for tok, i := range op.pending {
		delete(s.produces, tok)
		idx = append(idx, i)
	}
	slices.Sort(idx) // the same answer whatever the map's order
	msg := "timed out waiting for the config change to commit; it may still apply"
	for _, i := range idx {
		op.setErr(i, kerr.RequestTimedOut.Code, &msg)
	}
	clear(op.pending)
}

func (op *alterOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *alterOp) waits() []<-chan struct{} { return nil }

// brokerResource reports whether name is this server's broker resource:
// its node id (the broker.id of Backend.BrokerConfigs), or "" (the broker
// answering, as Kafka allows).
func (s *Session) brokerResource(name string) bool {
	if name == "" {
		return true
	}
	for _, c := range s.be.BrokerConfigs() {
		if c.Name == "broker.id" {
			return c.Value == name
		}
	}
	return false
}
