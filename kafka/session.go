package kafka

import (
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/internal/canary"
)

// ProduceToken names one Backend.Produce call of a session.
type ProduceToken uint64

// Completion is the outcome of one Backend.Produce call, delivered to the
// session that made it with ProduceDone.
type Completion struct {
	Token ProduceToken
	Produced
	Configs []ConfigEntry // Backend.DescribeStreamConfig
	Err     error
}

// Output is what a session asks its driver to do, taken with Take.
type Output struct {
	// Data holds whole response frames, in request order, to be written
	// to the connection (one write). Nil when there is nothing, and in a
	// vectored session (SetVectored), whose output is in Vec.
	Data []byte
	// Vec (vectored sessions only) holds the response frames as pieces,
	// some of them stored record bytes not copied: write them in order
	// (one writev), then call Release.
	Vec [][]byte
	// Release lists the pooled memory Vec aliases: call Release on each
	// once Vec is written (or dropped).
	Release []Releaser
	// Close: close the connection after writing Data. Reason says why.
	Close  bool
	Reason string
	// Deadline is the time (ns, the driver's clock) at which Poll must be
	// called; 0 means none.
	Deadline int64
	// Wait lists channels (from LogView.Changed) of parked fetches: when
	// any is closed, call Poll.
	Wait []<-chan struct{}
	// Paused: the in-flight bound is reached; do not call Receive until a
	// later Output says otherwise (stop reading the socket meanwhile).
	Paused bool
	// Idle: no request is pending (the driver may close gracefully).
	Idle bool
	// Timings of the requests released since the last Take (only with
	// Config.Observer): the driver fills in Taken and Sent. Valid until
	// the session's next call.
	Timings []RequestTiming
}

// Session is the deterministic state machine of one client connection: it
// decodes requests, runs them against the Backend, and releases responses
// strictly in request order. It starts no goroutines, reads no clock and does
// no IO; time comes in as int64 nanoseconds. It is not safe for concurrent
// use: one loop owns it. The Backend's done callbacks must not call into the
// session: they go through notify, and the driver feeds them back with
// ProduceDone.
//
// Same-connection guarantee. Requests are decoded and produce requests
// submitted in arrival order (pipelined: no waiting for earlier ones), and
// responses leave in that order. Once a produce fails (any error code in its
// response, or any error for acks=0, which has no response), the session
// reads no further request, sends every response before the failed one and
// the failed one itself (none for acks=0), and closes the connection.
// Requests read after the failed one get no answer: their outcome is unknown
// to the client, which is the truth (a pipelined produce may have been
// committed), and the client reconnects.
type Session struct {
	cfg    Config
	prof   *Profile
	be     Backend
	notify func(Completion)
	frame  []byte // the request frame being handled (the session's until its produces are proposed)

	slots     []*slot
	out       []byte
	vectored  bool       // SetVectored: output in vec, not copied into out
	vec       [][]byte   // vectored output
	vecBytes  int        // bytes in vec
	rels      []Releaser // what vec aliases
	inflight  int        // request bytes of unreleased slots
	stopped   bool
	closeNow  bool
	reason    string
	nextToken ProduceToken
	chain     uint64 // the produce chain (Records.Chain)
	chained   bool   // a produce went out in it
	closed    bool
	produces  map[ProduceToken]completer

	groups     *Groups
	clientID   string // of the request being handled
	clientHost string
	sasl       saslState // Config.SASL: the client's authentication

	// canary.ReorderResponses: responses released so far, and one held
	// back to go out after the next.
	released int
	heldResp []byte

	// Request timings (Config.Observer): the now of the call being
	// handled, the request the last Receive took (for Handled), the
	// requests released since the last Take, and Take's buffer.
	now           int64
	lastReceived  *slot
	releasedTimed []*slot
	timings       []RequestTiming
}

// completer is an outstanding Backend.Produce of a request (a produce
// partition or an offset commit).
type completer interface {
	complete(s *Session, c Completion, now int64)
}

// abandoner is an operation with outstanding backend calls to forget when
// the connection closes.
type abandoner interface {
	abandon(s *Session)
}

// slot is one request awaiting release.
type slot struct {
	key, version int16
	corr         int32
	size         int
	done         bool       // the response (or its absence) is decided
	resp         []byte     // encoded response frame; nil for none
	vec          [][]byte   // or the frame as pieces (a spliced fetch)
	rels         []Releaser // pooled memory vec aliases
	closeAfter   string     // close the connection once this slot is released
	op           operation
	timed        bool // a request (not a protocol error's close): its timing is reported
	timing       RequestTiming
}

// operation is a request that cannot be answered at once.
type operation interface {
	// poll re-checks the operation; it may finish the slot.
	poll(s *Session, now int64)
	deadline() int64
	waits() []<-chan struct{}
}

// handler runs one decoded request. It either finishes sl at once or sets
// sl.op.
type handler func(s *Session, sl *slot, req kmsg.Request, now int64)

// NewSession returns a session for one connection. notify receives produce
// completions from any goroutine; it must hand them to the session's loop
// (ProduceDone) and must not block.
//
// The session gets a group coordinator of its own; sessions of one server
// share one (NewSessionWithGroups).
func NewSession(cfg Config, be Backend, notify func(Completion)) (*Session, error) {
	return NewSessionWithGroups(cfg, be, nil, notify)
}

// NewSessionWithGroups returns a session whose group and offset requests go
// to g (nil: a coordinator of its own, configured from cfg).
func NewSessionWithGroups(cfg Config, be Backend, g *Groups, notify func(Completion)) (*Session, error) {
	cfg, prof, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if g == nil {
		g = NewGroups(cfg.groupsConfig(), be)
	}
	if cfg.SASL != nil {
		prof = prof.withSASL()
	}
	return &Session{cfg: cfg, prof: prof, be: be, notify: notify, produces: map[ProduceToken]completer{}, groups: g,
		chain: nextChain.Add(1)}, nil
}

// nextChain numbers sessions' produce chains (Records.Chain) uniquely in
// the process. The numbers only name chains: nothing depends on their
// values or order.
var nextChain atomic.Uint64

// Close ends the session: the driver calls it once the connection is
// gone. It forgets the session's produce chain.
func (s *Session) Close() {
	if s.chained && !s.closed {
		s.be.EndChain(s.chain)
	}
	s.closed = true
}

// SetVectored makes Take return the output as pieces in Output.Vec, a
// fetch's stored record bytes among them uncopied, with the memory to
// release after writing them (Output.Release). Without it, pieces are
// copied into Output.Data and released at once.
func (s *Session) SetVectored(on bool) { s.vectored = on }

// SetClientHost sets the client address reported for group members.
func (s *Session) SetClientHost(host string) { s.clientHost = host }

// Receive handles one request frame (without its length prefix).
func (s *Session) Receive(now int64, frame []byte) { s.ReceiveRead(now, now, frame) }

// ReceiveRead is Receive of a frame the driver finished reading at readAt
// (the request's queue stage starts there).
func (s *Session) ReceiveRead(now, readAt int64, frame []byte) {
	if s.stopped {
		return // after a failure or a protocol error nothing more is read
	}
	s.now = now
	s.lastReceived = nil
	s.frame = frame
	s.receive(now, readAt, frame)
	s.frame = nil
	s.release()
}

func (s *Session) receive(now, readAt int64, frame []byte) {
	if len(frame) > s.cfg.MaxFrameBytes {
		s.protocolError(fmt.Sprintf("request frame of %d bytes exceeds %d", len(frame), s.cfg.MaxFrameBytes))
		return
	}
	if s.authRequired() && s.sasl.raw {
		s.receiveToken(frame)
		return
	}
	h, body, err := ParseRequestHeader(frame)
	if err != nil {
		s.protocolError(fmt.Sprintf("bad request header (key %d v%d): %v", h.Key, h.Version, err))
		return
	}
	if s.authRequired() && h.Key != keyApiVersions && h.Key != keySASLHandshake && h.Key != keySASLAuthenticate {
		s.protocolError(fmt.Sprintf("%s before SASL authentication: this listener needs SASL (SaslHandshake, SaslAuthenticate)", kmsg.NameForKey(h.Key)))
		return
	}
	sl := &slot{key: h.Key, version: h.Version, corr: h.CorrelationID, size: len(frame), timed: true,
		timing: RequestTiming{Key: h.Key, Read: readAt, Dequeued: now}}
	s.lastReceived = sl
	if !s.prof.Supports(h.Key, h.Version) {
		if h.Key == keyApiVersions && h.Version >= 0 {
			// A newer ApiVersions than ours: answer in a v0 body with
			// UNSUPPORTED_VERSION and our ranges; the client retries
			// with a version we list, on this connection.
			sl.version = 0 // the answer is a v0 body
			s.push(sl)
			resp := s.apiVersionsResponse(0)
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			s.finish(sl, resp)
			return
		}
		s.protocolError(fmt.Sprintf("unsupported request: key %d (%s) version %d (profile %s)", h.Key, kmsg.NameForKey(h.Key), h.Version, s.prof.Name))
		return
	}
	if err := checkShape(h.Key, h.Version, h.Flexible, body); err != nil {
		s.protocolError(fmt.Sprintf("malformed %s v%d request: %v", kmsg.NameForKey(h.Key), h.Version, err))
		return
	}
	req := kmsg.RequestForKey(h.Key)
	req.SetVersion(h.Version)
	if err := req.ReadFrom(body); err != nil {
		s.protocolError(fmt.Sprintf("malformed %s v%d request: %v", kmsg.NameForKey(h.Key), h.Version, err))
		return
	}
	s.push(sl)
	s.clientID = ""
	if h.ClientID != nil {
		s.clientID = *h.ClientID
	}
	apiByKey[h.Key].handle(s, sl, req, now)
}

func (s *Session) push(sl *slot) {
	s.slots = append(s.slots, sl)
	s.inflight += sl.size
}

// protocolError stops reading and closes the connection once every earlier
// request is answered.
func (s *Session) protocolError(reason string) {
	s.stopped = true
	s.slots = append(s.slots, &slot{done: true, closeAfter: reason})
}

// finish encodes resp as sl's response.
func (s *Session) finish(sl *slot, resp kmsg.Response) {
	resp.SetVersion(sl.version)
	sl.resp = appendResponse(nil, sl.key, sl.corr, resp)
	sl.done = true
	sl.op = nil
	sl.timing.Completed = s.now
}

// finishSilently decides sl without a response (acks=0).
func (s *Session) finishSilently(sl *slot) {
	sl.done = true
	sl.op = nil
	sl.timing.Completed = s.now
}

// fail marks sl as a failed produce: nothing after it is read or answered,
// and the connection closes once it is released.
func (s *Session) fail(sl *slot, reason string) {
	if canary.On(canary.SkipPoison) {
		return // broken on purpose: later requests are served
	}
	s.stopped = true
	sl.closeAfter = reason
}

// emit appends a response frame to the output; more says a later request
// is waiting for its answer.
func (s *Session) emit(resp []byte, more bool) {
	if canary.On(canary.ReorderResponses) && len(resp) > 0 {
		// Broken on purpose: the second response waits for the next.
		s.released++
		switch {
		case s.heldResp != nil:
			s.put(resp)
			resp, s.heldResp = s.heldResp, nil
		case s.released == 2 && more:
			s.heldResp = resp
			return
		case s.released == 2:
			s.released-- // try again with the next response
		}
	}
	s.put(resp)
}

// put adds a whole frame to the output.
func (s *Session) put(resp []byte) {
	if s.vectored {
		if len(resp) > 0 {
			s.vec = append(s.vec, resp)
			s.vecBytes += len(resp)
		}
		return
	}
	s.out = append(s.out, resp...)
}

// emitSlot releases sl's response to the output: its pieces as they are
// when vectored, else copied (and their memory released).
func (s *Session) emitSlot(sl *slot, more bool) {
	if sl.vec != nil && (!s.vectored || canary.On(canary.ReorderResponses)) {
		sl.resp = joinPieces(make([]byte, 0, piecesLen(sl.vec)), sl.vec)
		releaseAll(sl.rels)
		sl.vec, sl.rels = nil, nil
	}
	if sl.vec == nil {
		s.emit(sl.resp, more)
		return
	}
	s.vec = append(s.vec, sl.vec...)
	s.vecBytes += piecesLen(sl.vec)
	s.rels = append(s.rels, sl.rels...)
}

// release moves finished responses from the head of the queue to the output.
func (s *Session) release() {
	n := 0
	for _, sl := range s.slots {
		if !sl.done {
			break
		}
		n++
		s.emitSlot(sl, len(s.slots) > n)
		s.recordReleased(sl)
		s.inflight -= sl.size
		if sl.closeAfter != "" {
			s.closeNow = true
			s.reason = sl.closeAfter
			// Drop everything after: those requests get no answer.
			for _, later := range s.slots[n:] {
				if p, ok := later.op.(abandoner); ok {
					p.abandon(s)
				}
			}
			s.slots = nil
			s.inflight = 0
			return
		}
	}
	clear(s.slots[:n])
	s.slots = s.slots[n:]
}

// ProduceDone delivers the outcome of a Backend.Produce call.
func (s *Session) ProduceDone(now int64, c Completion) {
	p, ok := s.produces[c.Token]
	if !ok {
		return // timed out, or abandoned after a failure
	}
	delete(s.produces, c.Token)
	s.now = now
	p.complete(s, c, now)
	s.release()
}

// Poll re-checks parked requests (fetches waiting for data) and deadlines.
// Call it at Output.Deadline and when an Output.Wait channel closes; extra
// calls are harmless.
func (s *Session) Poll(now int64) {
	s.now = now
	for _, sl := range s.slots {
		if sl.op != nil {
			sl.op.poll(s, now)
		}
	}
	s.release()
}

// Tick is Poll; drivers with a periodic timer may call it.
func (s *Session) Tick(now int64) { s.Poll(now) }

// Take returns what the driver must do now and clears the pending output.
func (s *Session) Take() Output {
	o := Output{Data: s.out, Vec: s.vec, Release: s.rels, Close: s.closeNow, Reason: s.reason, Timings: s.takeTimings()}
	outBytes := len(s.out) + s.vecBytes
	s.out, s.vec, s.rels, s.vecBytes = nil, nil, nil, 0
	for _, sl := range s.slots {
		if sl.op == nil {
			continue
		}
		if d := sl.op.deadline(); d != 0 && (o.Deadline == 0 || d < o.Deadline) {
			o.Deadline = d
		}
		o.Wait = append(o.Wait, sl.op.waits()...)
	}
	o.Paused = len(s.slots) >= s.cfg.MaxInFlightRequests || s.inflight+outBytes >= s.cfg.MaxInFlightBytes
	o.Idle = len(s.slots) == 0
	return o
}

// InFlightBytes returns the bytes of the requests read and not yet
// answered.
func (s *Session) InFlightBytes() int { return s.inflight }

// brokers are the brokers this listener advertises.
func (s *Session) brokers() []Broker {
	if s.cfg.Brokers != nil {
		return s.cfg.Brokers()
	}
	return s.be.Brokers()
}

// Pending returns the number of requests read and not yet answered.
func (s *Session) Pending() int { return len(s.slots) }
