package kafka

// RequestTiming is one request's way through a connection, in the driver's
// clock (ns), split into the stages of Kafka's RequestMetrics:
//
//	queue          Read → Dequeued   read whole, waiting for the session to take it
//	local          Dequeued → Local  the handler running (decode, validate, propose)
//	remote         Local → Completed waiting on others: Raft commit, a fetch's long poll
//	response_queue Completed → Taken answered, waiting behind earlier responses and for the driver
//	send           Taken → Sent      written to the socket
//
// The Session sets Dequeued and Completed from the now of the call that
// took or finished the request, and Local from Handled; the driver sets
// Read, Taken and Sent. The session reads no clock.
type RequestTiming struct {
	Key                                           int16
	Read, Dequeued, Local, Completed, Taken, Sent int64
}

// Stage durations (ns). Their sum is Total.
func (t *RequestTiming) Queue() int64         { return t.Dequeued - t.Read }
func (t *RequestTiming) LocalTime() int64     { return t.Local - t.Dequeued }
func (t *RequestTiming) Remote() int64        { return t.Completed - t.Local }
func (t *RequestTiming) ResponseQueue() int64 { return t.Taken - t.Completed }
func (t *RequestTiming) Send() int64          { return t.Sent - t.Taken }
func (t *RequestTiming) Total() int64         { return t.Sent - t.Read }

// Observer is told what a Server's connections do, for metrics. Its methods
// run on the connections' goroutines, concurrently: they must be cheap and
// must not block.
type Observer interface {
	// RequestDone: a request's response was written (or, without a
	// response, decided). t is only valid during the call.
	RequestDone(t *RequestTiming)
	// Connections: a connection of the named listener opened (+1) or
	// closed (-1).
	Connections(listener string, delta int)
}

// Handled records that the handler of the request taken by the last
// Receive returned at now (Kafka's local stage ends): a driver that
// collects timings (Config.Observer) calls it right after Receive.
func (s *Session) Handled(now int64) {
	sl := s.lastReceived
	if sl == nil {
		return
	}
	s.lastReceived = nil
	sl.timing.Local = now
	if sl.done && sl.timing.Completed == sl.timing.Dequeued {
		sl.timing.Completed = now // answered by the handler itself: no remote stage
	}
}

// recordReleased keeps a released request for the next Take (its slot:
// Handled may still set its local stage).
func (s *Session) recordReleased(sl *slot) {
	if s.cfg.Observer != nil && sl.timed {
		s.releasedTimed = append(s.releasedTimed, sl)
	}
}

// takeTimings returns the timings of the requests released since the last
// call, in a buffer reused by the next.
func (s *Session) takeTimings() []RequestTiming {
	s.timings = s.timings[:0]
	for _, sl := range s.releasedTimed {
		t := sl.timing
		if t.Local == 0 {
			t.Local = t.Dequeued // no Handled call: the local stage is not measured
		}
		t.Completed = max(t.Completed, t.Local)
		s.timings = append(s.timings, t)
	}
	clear(s.releasedTimed)
	s.releasedTimed = s.releasedTimed[:0]
	return s.timings
}
