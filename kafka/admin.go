package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
)

// StreamAdmin is what a Backend implements when streams can be created and
// deleted at runtime (a server with config servers; see CreateTopics and
// DeleteTopics). A backend without it answers both with POLICY_VIOLATION.
type StreamAdmin interface {
	// CreateStreams creates streams; done gets one error per request, nil
	// for a stream created, an *AdminError for a refusal. done may run on
	// any goroutine, once.
	CreateStreams(reqs []CreateStream, done func([]error))
	// DeleteStreams deletes streams by name, like CreateStreams.
	DeleteStreams(names []string, done func([]error))
}

// CreateStream is one stream to create.
type CreateStream struct {
	Name              string
	ReplicationFactor int // 0: the default
	RetentionMs       *int64
	RetentionBytes    *int64
	PreferredDC       string
}

// AdminError is a refusal with the Kafka error code that says why.
type AdminError struct {
	Code int16
	Msg  string
}

func (e *AdminError) Error() string { return e.Msg }

// adminCode is the code and message of a StreamAdmin outcome.
func adminCode(err error) (int16, string) {
	if err == nil {
		return errNone, ""
	}
	if ae, ok := err.(*AdminError); ok {
		return ae.Code, ae.Msg
	}
	return kerr.UnknownServerError.Code, err.Error()
}

// adminOp parks a CreateTopics or DeleteTopics until the backend answers
// (done closes) or its timeout passes.
type adminOp struct {
	sl     *slot
	dl     int64
	done   chan struct{}
	errs   []error                           // set before done closes
	answer func(errs []error, timedOut bool) // builds and finishes the response
}

func (op *adminOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	select {
	case <-op.done:
		op.answer(op.errs, false)
	default:
		if now >= op.dl {
			op.answer(nil, true)
		}
	}
}

func (op *adminOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.dl
}

func (op *adminOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return []<-chan struct{}{op.done}
}

// adminTimeout is a request's timeout, bounded to [1s, 60s] (nanoseconds).
func adminTimeout(ms int32) int64 {
	return int64(min(max(ms, 1000), 60000)) * 1e6
}
