package simulator

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// backend is kafka.Backend over one simulated server, like server/backend.go
// over raftnode.Host: produce proposes on this node's core; reads come from
// its storage up to its applied high watermark, and only when it leads the
// group and has applied an entry of its own term.
type backend struct{ n *node }

func (b *backend) Brokers() []kafka.Broker {
	var out []kafka.Broker
	for _, n := range b.n.s.nodes {
		out = append(out, kafka.Broker{NodeID: int32(n.id), Host: fmt.Sprintf("n%d", n.id), Port: 9092, Rack: new(fmt.Sprintf("dc%d", n.dc))})
	}
	return out
}

func (b *backend) Controller() int32 { return int32(b.n.s.nodes[0].id) }

func (b *backend) Streams() []string { return b.n.s.streams }

func (b *backend) group(name string) (uint64, bool) {
	for i, s := range b.n.s.streams {
		if s == name {
			return b.n.s.groups[i], true
		}
	}
	return 0, false
}

func (b *backend) Stream(name string) (kafka.StreamInfo, bool) {
	g, ok := b.group(name)
	if !ok {
		return kafka.StreamInfo{}, false
	}
	var all []int32
	for _, n := range b.n.s.nodes {
		all = append(all, int32(n.id))
	}
	info := kafka.StreamInfo{Leader: -1, Replicas: all, ISR: all}
	v := b.n.grp[g]
	if v.leader != 0 {
		info.Leader = int32(v.leader)
	}
	if v.leader == b.n.id {
		info.Local = b.n.readable(g)
		if !info.Local {
			info.Leader = -1
		}
	}
	return info, true
}

func (b *backend) Produce(name string, recs []byte, done func(int64, error)) {
	g, ok := b.group(name)
	if !ok {
		done(0, kafka.ErrUnknownStream)
		return
	}
	b.n.propose(g, raftnode.UserData(recs), done)
}

func (b *backend) Log(name string) (kafka.LogView, error) {
	g, ok := b.group(name)
	if !ok {
		return nil, kafka.ErrUnknownStream
	}
	v := b.n.grp[g]
	switch {
	case v.leader == 0:
		return nil, kafka.ErrNoLeader
	case v.leader != b.n.id:
		return nil, kafka.ErrNotLeader
	case !b.n.readable(g):
		return nil, kafka.ErrNoLeader
	}
	return &logView{n: b.n, g: g, log: b.n.logs[g], v: v}, nil
}

type logView struct {
	n   *node
	g   uint64
	log *storage.Log
	v   *gview
}

func (l *logView) StartOffset() int64 { return l.log.StartOffset() }
func (l *logView) EndOffset() int64   { return l.log.EndOffset() }

func (l *logView) HighWatermark() int64 {
	if s := l.n.s; s.leaderTerm[l.g] > l.v.term {
		s.staleServes++
		s.w.record("n%d serves g%d hwm %d as leader of term %d, but term %d has a leader", l.n.id, l.g, l.v.hwm, l.v.term, s.leaderTerm[l.g])
	}
	if l.n.s.cfg.Canary == CanaryReadAboveHWM {
		return l.log.EndOffset() // broken on purpose: uncommitted records are visible
	}
	return l.v.hwm
}

func (l *logView) Read(offset, hwm int64, maxBytes int) ([]storage.Batch, error) {
	bs, err := l.log.Read(offset, hwm, maxBytes)
	if err != nil && errors.Is(err, storage.ErrCorrupt) {
		// Detected: the process stops (after this request's turn).
		n, s, inc := l.n, l.n.s, l.n.inc
		s.w.after(0, nil, func() {
			if n.inc == inc && !n.down {
				s.detect(n, "read", err)
			}
		})
	}
	if err == nil && l.n.s.cfg.Canary == CanaryServeCorrupt && l.n.corrupted {
		bs = serveCorrupt(bs)
	}
	return bs, err
}

func (l *logView) OffsetForTime(ts int64) (int64, int64, error) {
	off, err := l.log.OffsetForTime(ts)
	if err != nil || off >= l.HighWatermark() {
		return -1, -1, err
	}
	return off, -1, nil
}

func (l *logView) Changed() <-chan struct{} { return l.v.changed }

func (l *logView) Fence() kafka.ReadFence { return l.n.fence(l.g) }

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
	// Canary reorder: a response frame held back to be sent after the next.
	held     []byte
	reorders int
}

func (n *node) accept(c *cconn) (*sconn, error) {
	sc := &sconn{n: n, c: c}
	sess, err := kafka.NewSession(n.s.kafkaCfg, &backend{n: n}, func(comp kafka.Completion) {
		n.s.w.at(n.s.w.now, n, func() {
			if !sc.closed {
				sc.sess.ProduceDone(n.s.w.now, comp)
				sc.flush()
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
}

// flush carries out the session's output.
func (sc *sconn) flush() {
	s := sc.n.s
	for !sc.closed {
		out := sc.sess.Take()
		if len(out.Data) > 0 {
			data := out.Data
			if s.cfg.Canary == CanaryReorderResponses {
				data = sc.reorder(data)
			}
			s.toClient(sc, data)
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

// reorder (canary) swaps one pair of consecutive response frames of the
// connection: the first response after the metadata answer is held back and
// sent after the next one.
func (sc *sconn) reorder(data []byte) []byte {
	if sc.n.s.reordered {
		return data
	}
	var frames [][]byte
	for len(data) >= 4 {
		l := int(binary.BigEndian.Uint32(data)) + 4
		frames = append(frames, data[:l])
		data = data[l:]
	}
	var out []byte
	for _, f := range frames {
		sc.reorders++
		switch {
		case sc.reorders == 2 && !sc.n.s.reordered:
			sc.held = f
			continue
		case sc.held != nil:
			out = append(out, f...)
			out = append(out, sc.held...)
			sc.held = nil
			sc.n.s.reordered = true
			sc.n.s.w.record("CANARY conn %d: two responses swapped", sc.c.id)
			continue
		}
		out = append(out, f...)
	}
	return out
}

func (sc *sconn) close() {
	if sc.closed {
		return
	}
	sc.closed = true
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
