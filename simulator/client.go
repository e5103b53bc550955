package simulator

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/raftnode/producers"
)

// client is a simulated Kafka client bound to one stream: it finds the
// leader with Metadata, pipelines produces of unique values (acks=all) and
// consumes with fetches, over simulated connections carrying real Kafka
// request frames. Timeouts and disconnects make unknown outcomes.
//
// An idempotent client (idem) is an idempotent producer as franz-go's:
// each value is a one-record batch with its producer id, epoch and
// sequence; a value whose outcome it does not know (a timeout, a
// disconnect, an error answer such as NOT_LEADER) is sent again, with the
// same sequence, until it is acknowledged: the attempts are one write to
// the checker (checker.Op.Retry), which must land exactly once. A value
// refused for good (too large) is dropped and the producer bumps its epoch
// and numbers the values after it from 0 again, as clients do; so does an
// OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID or
// INVALID_PRODUCER_EPOCH answer (which a correct server never gives it:
// if the refused value had landed, the checker finds it twice).
type client struct {
	s      *Sim
	id     int
	stream string
	r      *rand.Rand
	conn   *cconn
	guess  uint64 // node to connect to next (0: any)

	pos      int64 // consumer position
	seek     bool  // the next fetch jumps (retention moved the start)
	fetching bool
	nextVal  int
	depth    int // produces pipelined per connection

	consumer  bool // only fetches (a Kafka consumer): never held up behind a produce
	idem      bool // an idempotent producer
	pid       int64
	epoch     int16
	nextSeq   int32
	writes    []*iwrite // idem: values not acknowledged yet, in sequence order
	stopped   bool
	final     bool // the final complete read
	finalMark bool // its fetches are marked Final (the stream starts at 0)
	finalDone bool
	finalHWM  int64
}

// cconn is the client end of one connection.
type cconn struct {
	id       int
	cl       *client
	n        *node
	sc       *sconn
	ready    bool
	closed   bool
	corr     int32
	inflight []*creq
	lastUp   int64 // TCP: in-order delivery per direction
	lastDown int64
}

type creq struct {
	corr    int32
	key     int16
	version int16
	h       *checker.Handle // nil for metadata
	value   string
	w       *iwrite // an idempotent produce's write
	from    int64
	done    bool
}

// iwrite is one value of an idempotent producer, until acknowledged.
type iwrite struct {
	value    string
	seq      int32
	epoch    int16
	attempts int
	inflight bool // sent on the current connection, not answered yet
}

func (c *cconn) lat() time.Duration { return c.cl.s.clientLatency(c.n) }

func (s *Sim) newClient(id int, stream string, final bool) *client {
	c := &client{s: s, id: id, stream: stream, r: s.w.stream(fmt.Sprintf("client-%d", id)), final: final, depth: 1 + id%3}
	if s.w.bug.enabled("client.deep-pipeline") {
		c.depth = 8
	}
	if final {
		g := s.groups[0]
		for i, st := range s.streams {
			if st == stream {
				g = s.groups[i]
			}
		}
		c.finalMark = true
		if l := s.leader(g); l != nil && l.logs[g].StartOffset() > 0 {
			c.finalMark = false // retention deleted the head: not a complete read
			c.pos = l.logs[g].StartOffset()
			c.seek = true
		}
		c.finalHWM = -1
	}
	return c
}

// loop is the client's think loop.
func (c *client) loop() {
	s := c.s
	if c.stopped || c.finalDone {
		return
	}
	defer s.w.after(durn(c.r, 2*time.Millisecond, 40*time.Millisecond), nil, c.loop)
	if c.conn == nil {
		c.connect()
		return
	}
	if !c.conn.ready {
		return
	}
	if c.final || c.consumer {
		if !c.fetching {
			c.fetch()
		}
		return
	}
	produces := 0
	for _, q := range c.conn.inflight {
		if q.key == 0 {
			produces++
		}
	}
	depth := c.depth
	if c.idem {
		// An idempotent producer has at most five requests in flight (the
		// server remembers a producer's last five batches): Kafka's rule,
		// which clients enforce.
		depth = min(depth, producers.Window)
	}
	switch {
	case c.r.Float64() < 0.6 && produces < depth:
		c.produce()
	case !c.fetching:
		c.fetch()
	}
}

func (c *client) connect() {
	s := c.s
	n := s.node(c.guess)
	if n == nil {
		// Nodes stopped for good after detecting corruption are left out,
		// as an operator drops a dead broker from the bootstrap list.
		up := s.nodes
		if slices.ContainsFunc(up, func(n *node) bool { return n.quarantined }) {
			up = slices.DeleteFunc(slices.Clone(up), func(n *node) bool { return n.quarantined })
		}
		n = up[c.r.IntN(len(up))]
	}
	c.guess = 0
	s.nextConn++
	cc := &cconn{id: s.nextConn, cl: c, n: n}
	c.conn = cc
	s.w.after(cc.lat(), n, func() {
		if s.clientCut[n.id] > 0 {
			s.w.after(cc.lat(), nil, func() { cc.broken("connection refused") })
			return
		}
		sc, err := n.accept(cc)
		if err != nil {
			s.fail(checkHarness, "accept: %v", err)
			return
		}
		cc.sc = sc
		s.w.after(cc.lat(), nil, func() {
			if cc.closed {
				return
			}
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(1)
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(c.stream)
			req.Topics = append(req.Topics, t)
			cc.send(req, &creq{}, 2*time.Second)
		})
	})
	// A process that never answers (down, paused) makes connecting time out.
	s.w.after(2*time.Second, nil, func() {
		if c.conn == cc && !cc.ready && !cc.closed {
			cc.close("connect timeout")
		}
	})
}

// send writes a request frame and arms the client-side timeout.
func (cc *cconn) send(req kmsg.Request, q *creq, timeout time.Duration) {
	s := cc.cl.s
	cc.corr++
	q.corr, q.key, q.version = cc.corr, req.Key(), req.GetVersion()
	cc.inflight = append(cc.inflight, q)
	frame := encodeRequest(req, q.corr, fmt.Sprintf("c%d", cc.cl.id))
	if s.clientCut[cc.n.id] > 0 {
		s.w.after(cc.lat(), nil, func() { cc.broken("network partition") })
	} else {
		t := max(s.w.now+int64(cc.lat()), cc.lastUp)
		cc.lastUp = t
		sc := cc.sc
		s.w.at(t, cc.n, func() { sc.receive(frame) })
	}
	s.w.after(timeout, nil, func() {
		if !q.done && !cc.closed {
			cc.close(fmt.Sprintf("request %d timed out", q.corr))
		}
	})
}

// nextValue returns a new value to produce.
func (c *client) nextValue() string {
	c.nextVal++
	value := fmt.Sprintf("c%d-%d", c.id, c.nextVal)
	s := c.s
	if s.w.bug.fire(c.r, "client.oversized", 0.03) {
		// More than one Raft entry may hold: refused with MESSAGE_TOO_LARGE.
		value += "-" + strings.Repeat("x", int(s.coreCfg.MaxEntryBytes))
		s.w.faults["oversized-produce"]++
	} else if !s.cfg.modelBefore1203 && s.w.bug.fire(c.r, "client.large-values", 0.3) {
		// With a small uncommitted budget a big produce is refused
		// (backpressure) where a small one pipelined behind it fits: it
		// must be refused too (raftnode.Chain).
		n := 300 + c.r.IntN(600)
		if n >= 890 {
			// One in sixty of them 33-42 KiB: an entry the storage writes
			// from raft's own bytes once its leader stamped it
			// (raftnode/stamp.go). The same draw: no seed's course moves
			// but by the sizes.
			n = (n - 857) << 10
			s.w.faults["huge-value"]++
		}
		value += "-" + strings.Repeat("y", n)
		s.w.faults["large-value"]++
	}
	return value
}

// nextWrite returns what an idempotent producer sends next: the first
// value without an answer that is not in flight (a retry), else a new one.
func (c *client) nextWrite() *iwrite {
	for _, w := range c.writes {
		if !w.inflight {
			return w
		}
	}
	w := &iwrite{value: c.nextValue(), seq: c.nextSeq, epoch: c.epoch}
	c.nextSeq++
	c.writes = append(c.writes, w)
	return w
}

func (c *client) produce() {
	cc := c.conn
	s := c.s
	var w *iwrite
	var value string
	if c.idem {
		w = c.nextWrite()
		w.inflight = true
		w.attempts++
		value = w.value
	} else {
		value = c.nextValue()
	}
	timeout := int32(durn(c.r, 300*time.Millisecond, 1500*time.Millisecond) / time.Millisecond)
	if s.w.bug.fire(c.r, "client.short-timeout", 0.5) {
		timeout = int32(durn(c.r, 30*time.Millisecond, 150*time.Millisecond) / time.Millisecond)
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(7)
	req.Acks = -1
	req.TimeoutMillis = timeout
	t := kmsg.NewProduceRequestTopic()
	t.Topic = c.stream
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition = 0
	if w != nil {
		p.Records = makeIdempotentBatch(s.w.now/1e6, value, c.pid, w.epoch, w.seq)
	} else {
		p.Records = makeBatch(s.w.now/1e6, value)
	}
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	h := s.rec.Invoke(checker.Op{Kind: checker.KindProduce, Stream: c.stream, Client: c.id, Conn: cc.id, Value: value,
		Retry: w != nil && w.attempts > 1})
	cc.send(req, &creq{h: h, value: value, w: w}, time.Duration(timeout)*time.Millisecond+500*time.Millisecond)
}

// acked: an idempotent write was acknowledged.
func (c *client) acked(w *iwrite) {
	c.writes = slices.DeleteFunc(c.writes, func(x *iwrite) bool { return x == w })
}

// refused: an idempotent write was answered with an error. The server
// closes the connection after it (the values in flight behind it are
// sent again on the next one). A retriable refusal sends it again too.
func (c *client) refused(w *iwrite, code int16) {
	w.inflight = false
	switch code {
	case 10, 2, 17, 21, 76: // MESSAGE_TOO_LARGE and the like: never accepted
		c.acked(w) // given up
		c.resetSequences("value refused for good")
	case 45, 47, 59: // OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID
		c.s.w.faults["producer-reset"]++
		c.resetSequences(fmt.Sprintf("error %d", code))
	}
}

// resetSequences bumps the epoch and numbers the values without an answer
// from 0 (KIP-360, as franz-go does for an idempotent producer).
func (c *client) resetSequences(why string) {
	c.epoch++
	for i, w := range c.writes {
		w.seq, w.epoch = int32(i), c.epoch
	}
	c.nextSeq = int32(len(c.writes))
	c.s.w.record("client %d (producer %d) epoch %d, %d values renumbered: %s", c.id, c.pid, c.epoch, len(c.writes), why)
}

func (c *client) fetch() {
	cc := c.conn
	s := c.s
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(c.r.IntN(150))
	req.MinBytes = int32(c.r.IntN(2))
	if c.final {
		req.MaxWaitMillis, req.MinBytes = 0, 0
	}
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = c.stream
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition = 0
	p.FetchOffset = c.pos
	p.PartitionMaxBytes = 1 << 16
	p.CurrentLeaderEpoch = -1
	p.LogStartOffset = -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	h := s.rec.Invoke(checker.Op{Kind: checker.KindFetch, Stream: c.stream, Client: c.id, Conn: cc.id, From: c.pos, Seek: c.seek, Final: c.finalMark})
	c.seek = false
	c.fetching = true
	cc.send(req, &creq{h: h, from: c.pos}, time.Duration(req.MaxWaitMillis)*time.Millisecond+time.Second)
}

// receive handles response bytes (whole frames, in order).
func (cc *cconn) receive(data []byte) {
	if cc.closed {
		return
	}
	for len(data) >= 8 {
		l := int(binary.BigEndian.Uint32(data)) + 4
		frame := data[4:l]
		data = data[l:]
		corr := int32(binary.BigEndian.Uint32(frame))
		var q *creq
		for i, x := range cc.inflight {
			if x.corr == corr { // a real client insists on order; the checker judges it
				q = x
				cc.inflight = append(cc.inflight[:i:i], cc.inflight[i+1:]...)
				break
			}
		}
		if q == nil {
			cc.cl.s.fail(checkProtocol, "conn %d: response with unknown correlation id %d", cc.id, corr)
			continue
		}
		q.done = true
		resp := kmsg.ResponseForKey(q.key)
		resp.SetVersion(q.version)
		if err := resp.ReadFrom(frame[4:]); err != nil {
			cc.cl.s.fail(checkProtocol, "conn %d: cannot decode %s v%d response: %v", cc.id, kmsg.NameForKey(q.key), q.version, err)
			continue
		}
		cc.cl.handle(cc, q, resp)
		if cc.closed {
			return
		}
	}
}

func (c *client) handle(cc *cconn, q *creq, resp kmsg.Response) {
	s := c.s
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		leader := int32(-1)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.Partition == 0 && p.ErrorCode == 0 {
					leader = p.Leader
				}
			}
		}
		switch {
		case leader == int32(cc.n.id):
			cc.ready = true
		case leader > 0:
			c.guess = uint64(leader)
			cc.close("leader is elsewhere")
		default:
			cc.close("no leader")
		}
	case *kmsg.ProduceResponse:
		p := r.Topics[0].Partitions[0]
		if p.ErrorCode == 0 {
			q.h.ProduceOK(p.BaseOffset)
			if q.w != nil {
				c.acked(q.w)
			}
			if s.liveness && q.h != nil {
				s.progress[c.stream] = true
			}
		} else {
			if q.w != nil {
				c.refused(q.w, p.ErrorCode)
				// The server answers nothing after a failed produce: what is
				// in flight behind it goes again on a new connection.
				defer cc.close("produce failed")
			}
			// Refusals before anything was written are definite failures,
			// NOT_LEADER included; timeouts leave the outcome unknown (the
			// checker must not treat them as failures). Either way the error
			// poisons the connection (checker.OKAfterFailure).
			q.h.Error(p.ErrorCode, definiteProduceError(p.ErrorCode))
		}
	case *kmsg.FetchResponse:
		c.fetching = false
		p := r.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			q.h.Complete(checker.Completion{Outcome: checker.OutcomeFail, Err: fmt.Sprintf("error %d", p.ErrorCode), HighWatermark: -1, Responded: true})
			if p.ErrorCode == 1 && p.LogStartOffset > c.pos {
				c.pos, c.seek = p.LogStartOffset, true
				// Retention deleted the head on the leader serving the
				// read: not a complete read, as newClient decides when
				// the leader it looked at had (seed 2666 with the control
				// plane: the final read began at 0 on one replica's word,
				// the leader's log started at 11, and the checker counted
				// the deleted records as lost).
				c.finalMark = false
			}
			if p.ErrorCode == 6 || p.ErrorCode == 5 {
				cc.close("not the leader")
			}
			return
		}
		var recs []checker.Record
		for _, rec := range decodeRecords(p.RecordBatches) {
			if rec.Offset >= q.from {
				recs = append(recs, rec)
			}
		}
		q.h.FetchOK(recs, p.HighWatermark)
		if len(recs) > 0 {
			c.pos = recs[len(recs)-1].Offset + 1
		}
		if c.final && c.pos >= p.HighWatermark {
			c.finalDone = true
		}
	}
}

// definiteProduceError reports the produce error codes VDL answers only
// for requests it refused before proposing them: nothing was written.
func definiteProduceError(code int16) bool {
	switch code {
	case 2, 3, 10, 17, 19, 21, 56, 76: // CORRUPT_MESSAGE, UNKNOWN_TOPIC, MESSAGE_TOO_LARGE, INVALID_TOPIC,
		// NOT_ENOUGH_REPLICAS (backpressure), INVALID_REQUIRED_ACKS, KAFKA_STORAGE_ERROR, UNSUPPORTED_COMPRESSION
		return true
	case 45, 47, 59: // OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID: refused
		return true
	case 6: // NOT_LEADER_OR_FOLLOWER: not proposed, or overwritten by a new leader's log (clients
		// such as librdkafka take it as "not persisted" and send the records again); an
		// unknown outcome (a stopped host) is answered REQUEST_TIMED_OUT
		return true
	}
	return false
}

// close is the client closing the connection (timeout, wrong leader).
func (cc *cconn) close(why string) {
	if cc.closed {
		return
	}
	s := cc.cl.s
	cc.fail(why)
	if sc := cc.sc; sc != nil {
		s.w.after(cc.lat(), sc.n, func() { sc.close() })
	}
}

// broken is the connection dying under the client (reset, EOF).
func (cc *cconn) broken(why string) {
	if cc.closed {
		return
	}
	cc.fail(why)
	if sc := cc.sc; sc != nil {
		sc.close()
	}
}

// fail ends the connection on the client side: everything in flight has an
// unknown outcome.
func (cc *cconn) fail(why string) {
	c := cc.cl
	cc.closed = true
	for _, q := range cc.inflight {
		if q.h != nil {
			q.h.Info(why, false)
		}
		if q.w != nil {
			q.w.inflight = false // sent again on the next connection
		}
		q.done = true
	}
	cc.inflight = nil
	c.fetching = false
	if c.conn == cc {
		c.conn = nil
	}
	c.s.w.record("client %d conn %d to n%d closed: %s", c.id, cc.id, cc.n.id, why)
}

// abandon closes the client's connection at the end of the run.
func (c *client) abandon(why string) {
	if c.conn != nil {
		c.conn.close(why)
	}
}
