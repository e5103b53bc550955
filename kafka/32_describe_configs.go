package kafka

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs v0–v2 (modern profile only).
//
// A topic resource (2) is a stream: retention.ms, retention.bytes,
// cleanup.policy (always delete), max.message.bytes and preferred.dc, as
// the stream's leader has them (a follower asks it: an alter acknowledged
// before the describe is seen, whichever brokers the two went to): an
// override is DYNAMIC_TOPIC_CONFIG, otherwise DEFAULT_CONFIG (is_default in
// v0). No answer from the leader within 2 s → REQUEST_TIMED_OUT.
// A broker resource (4) named by this server's node id (or "") lists a few
// read-only broker configs from the server's TOML (STATIC_BROKER_CONFIG);
// another broker's id → INVALID_REQUEST (clients send broker resources to
// that broker). config_names selects (null: all; unknown names are left
// out, as Kafka). Synonyms (v1+, when asked) list the entry itself.
// Unknown stream → UNKNOWN_TOPIC_OR_PARTITION; a stream this server does
// not host → NOT_LEADER_FOR_PARTITION, no leader → LEADER_NOT_AVAILABLE;
// other resource types →
// INVALID_REQUEST. Errors carry a message.
var describeConfigsAPI = api{
	key:      kmsg.DescribeConfigs,
	modern:   upTo(2),
	handle:   handleDescribeConfigs,
	shape:    describeConfigsShape,
	shapeMax: 2,
}

// describeConfigsShape walks the request layout (checkShape).
func describeConfigsShape(r *shapeReader, v int16) {
	r.array(false, func() {
		r.i8()
		r.str(false)
		r.array(true, func() { r.str(false) })
		r.endStruct()
	})
	if v >= 1 {
		r.i8()
	}
	r.endStruct()
}

func handleDescribeConfigs(s *Session, sl *slot, kreq kmsg.Request, now int64) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	op := &describeOp{sl: sl, req: req, resp: kmsg.NewPtrDescribeConfigsResponse(), dl: now + fenceGrace,
		pending: map[ProduceToken]int{}}
	for i, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		rr.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		op.resp.Resources = append(op.resp.Resources, rr)
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			s.nextToken++
			tok, notify := s.nextToken, s.notify
			op.pending[tok] = i
			s.produces[tok] = op
			s.be.DescribeStreamConfig(r.ResourceName, func(cs []ConfigEntry, err error) {
				notify(Completion{Token: tok, Configs: cs, Err: err})
			})
		case kmsg.ConfigResourceTypeBroker:
			if !s.brokerResource(r.ResourceName) {
				op.setErr(i, kerr.InvalidRequest.Code, fmt.Sprintf("broker %q is not this broker: ask it", r.ResourceName))
				continue
			}
			op.fill(i, s.be.BrokerConfigs(), true)
		default:
			op.setErr(i, kerr.InvalidRequest.Code, fmt.Sprintf("resource type %d is not served (topic and broker are)", r.ResourceType))
		}
	}
	if len(op.pending) == 0 {
		s.finish(sl, op.resp)
		return
	}
	sl.op = op
}

// describeOp is a DescribeConfigs waiting for its streams' configs.
type describeOp struct {
	sl      *slot
	req     *kmsg.DescribeConfigsRequest
	resp    *kmsg.DescribeConfigsResponse
	dl      int64
	pending map[ProduceToken]int // token → resource index
}

func (op *describeOp) setErr(i int, code int16, msg string) {
	op.resp.Resources[i].ErrorCode, op.resp.Resources[i].ErrorMessage = code, &msg
}

// fill puts resource i's entries (those config_names selects) in the response.
func (op *describeOp) fill(i int, entries []ConfigEntry, readOnly bool) {
	r, rr := op.req.Resources[i], &op.resp.Resources[i]
	for _, e := range entries {
		if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, e.Name) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.ReadOnly = e.Name, new(e.Value), readOnly
		c.Source = kmsg.ConfigSource(e.Source)
		c.IsDefault = e.Source == ConfigDefault
		if op.req.Version >= 1 && op.req.IncludeSynonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = e.Name, c.Value, c.Source
			c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
		}
		rr.Configs = append(rr.Configs, c)
	}
}

func (op *describeOp) complete(s *Session, c Completion, _ int64) {
	i, ok := op.pending[c.Token]
	if !ok || op.sl.done {
		return
	}
	delete(op.pending, c.Token)
	if c.Err != nil {
		op.setErr(i, errorCode(c.Err, 0), fmt.Sprintf("stream %q: %v", op.req.Resources[i].ResourceName, c.Err))
	} else {
		op.fill(i, c.Configs, false)
	}
	if len(op.pending) == 0 {
		s.finish(op.sl, op.resp)
	}
}

func (op *describeOp) poll(s *Session, now int64) {
	if op.sl.done || now < op.dl {
		return
	}
	op.abandon(s)
	s.finish(op.sl, op.resp)
}

// abandon forgets the outstanding lookups; their resources answer
// REQUEST_TIMED_OUT if the response still goes out.
func (op *describeOp) abandon(s *Session) {
	idx := make([]int, 0, len(op.pending))
	for tok, i := range op.pending {
		delete(s.produces, tok)
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		op.setErr(i, kerr.RequestTimedOut.Code, "timed out asking the stream's leader for its config")
	}
	clear(op.pending)
}

func (op *describeOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *describeOp) waits() []<-chan struct{} { return nil }
