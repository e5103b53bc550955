package simulator

import (
	"time"

	"github.com/vdl-project/vdl/kafka"
)

// sconn is the server end of one simulated connection: a kafka.Session
// driven like the TCP driver drives it (Receive, ProduceDone, Poll, Take).
type sconn struct {
	n      *node
	c      *cconn
	sess   *kafka.Session
	waits  []<-chan struct{}
	pollAt int64
	paused bool
	inbox  [][]byte
	closed bool
}

func (n *node) accept(c *cconn) (*sconn, error) {
	sc := &sconn{n: n, c: c}
	sess, err := kafka.NewSession(n.s.kafkaCfg, n.backend, func(comp kafka.Completion) {
		// The outcome hops from the host's loop to the connection's (a
		// channel, another goroutine): requests read meanwhile are
		// submitted before the session learns of it, as in production,
		// where a pipelined produce behind a failed one was submitted
		// before the failure reached the session (raftnode.Chain).
		hop := 300 * time.Microsecond
		if n.s.cfg.modelBefore1203 {
			hop = 0
		}
		n.s.w.at(n.s.w.now+int64(durn(n.s.hopR, 0, hop)), n, func() {
			if !sc.closed {
				sc.sess.ProduceDone(n.s.w.now, comp)
				sc.flush()
				n.flush()
			}
		})
	})
	if err != nil {
		return nil, err
	}
	sc.sess = sess
	n.conns = append(n.conns, sc)
	return sc, nil
}

// receive handles one request frame arriving from the client.
func (sc *sconn) receive(frame []byte) {
	if sc.closed {
		return
	}
	if sc.paused || len(sc.inbox) > 0 {
		sc.inbox = append(sc.inbox, frame)
		return
	}
	sc.sess.Receive(sc.n.s.w.now, frame)
	sc.flush()
	sc.n.flush()
}

func (sc *sconn) wake() {
	if sc.closed {
		return
	}
	for _, ch := range sc.waits {
		select {
		case <-ch:
			sc.sess.Poll(sc.n.s.w.now)
			sc.flush()
			return
		default:
		}
	}
}

func (sc *sconn) poll() {
	if sc.closed {
		return
	}
	sc.sess.Poll(sc.n.s.w.now)
	sc.flush()
	sc.n.flush()
}

// flush carries out the session's output.
func (sc *sconn) flush() {
	s := sc.n.s
	for !sc.closed {
		out := sc.sess.Take()
		if len(out.Data) > 0 {
			s.toClient(sc, out.Data)
		}
		if out.Close {
			s.w.record("n%d closes conn %d: %s", sc.n.id, sc.c.id, out.Reason)
			sc.close()
			s.closeToClient(sc)
			return
		}
		sc.waits = out.Wait
		if out.Deadline > 0 && (sc.pollAt == 0 || out.Deadline < sc.pollAt || sc.pollAt <= s.w.now) {
			sc.pollAt = out.Deadline
			s.w.at(out.Deadline, sc.n, sc.poll)
		}
		sc.paused = out.Paused
		if sc.paused || len(sc.inbox) == 0 {
			return
		}
		f := sc.inbox[0]
		sc.inbox = sc.inbox[1:]
		sc.sess.Receive(s.w.now, f)
	}
}

func (sc *sconn) close() {
	if sc.closed {
		return
	}
	sc.closed = true
	sc.sess.Close()
	for i, x := range sc.n.conns {
		if x == sc {
			sc.n.conns = append(sc.n.conns[:i:i], sc.n.conns[i+1:]...)
			break
		}
	}
}

// reset drops the connection abruptly (process death, network): the client
// learns of it after a network delay.
func (sc *sconn) reset(why string) {
	if sc.closed {
		return
	}
	sc.close()
	s := sc.n.s
	c := sc.c
	s.w.after(s.clientLatency(sc.n), nil, func() { c.broken(why) })
}
