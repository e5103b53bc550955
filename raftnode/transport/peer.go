package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/internal/tlsbatch"
)

// Outgoing stream states.
const (
	stateConnecting int32 = iota // dialing, or about to; Send queues
	stateConnected               // stream up; Send queues
	stateDown                    // last attempt failed; Send drops at once
)

const (
	writeBufSize = 64 << 10
	// stableStream is how long a stream must live for its loss to be
	// followed by an immediate reconnection instead of a backoff.
	stableStream = time.Second
)

var (
	errStopped    = errors.New("transport stopped")
	errRedial     = errors.New("peer address changed")
	errPeerClosed = errors.New("peer closed the stream")
)

// frame is one encoded message waiting in a peer queue.
type frame struct {
	buf     *[]byte
	splices []splice // entry data written from the entries (splice.go)
	group   uint64
	snap    bool
	// dir is the data dir id of the peer the message is meant for (0:
	// whichever presents itself). The queue outlives connections: a
	// message queued while the stream is down is written on the next one,
	// perhaps to a process that came back on another data dir. Such a
	// message is dropped instead (see SendTo).
	dir uint64
}

// cost is what the frame is charged against MaxQueuedBytes: its buffer's
// capacity and the entry data it holds on to, the memory it really holds.
func (f frame) cost() int64 {
	n := int64(cap(*f.buf))
	for _, s := range f.splices {
		n += int64(len(s.data))
	}
	return n
}

// len is the frame's length on the wire.
func (f frame) len() int {
	n := len(*f.buf)
	for _, s := range f.splices {
		n += len(s.data)
	}
	return n
}

// peer is the sending side towards one remote node: a bounded queue and the
// writer goroutine that owns the outgoing stream.
type peer struct {
	t      *Transport
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc
	signal chan struct{} // cap 1: queue became non-empty
	redial chan struct{} // cap 1: address changed

	mu      sync.Mutex
	addr    string
	q       []frame
	qBytes  int64
	stopped bool
	conn    net.Conn // current outgoing connection, closed by stop

	state    atomic.Int32
	dir      atomic.Uint64 // the data dir the peer presented on the current stream
	maxFrame atomic.Uint32 // min(our MaxFrameBytes, the peer's)
	inbound  atomic.Int32  // established streams from the peer to us

	sentFrames, sentBytes, recvFrames, recvBytes atomic.Uint64
	dropped, reconnects, dialFailures            atomic.Uint64
	droppedStale                                 atomic.Uint64 // meant for another data dir
	queued                                       atomic.Int64  // mirror of qBytes for Stats
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	p := &peer{
		t:      t,
		id:     id,
		addr:   addr,
		signal: make(chan struct{}, 1),
		redial: make(chan struct{}, 1),
	}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	p.maxFrame.Store(uint32(t.cfg.MaxFrameBytes))
	return p
}

func (p *peer) stats() PeerStats {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	connected := p.state.Load() == stateConnected
	var dir uint64
	if connected {
		dir = p.dir.Load()
	}
	return PeerStats{
		Addr:         addr,
		Connected:    connected,
		Dir:          dir,
		Inbound:      p.inbound.Load() > 0,
		QueuedBytes:  p.queued.Load(),
		SentFrames:   p.sentFrames.Load(),
		SentBytes:    p.sentBytes.Load(),
		RecvFrames:   p.recvFrames.Load(),
		RecvBytes:    p.recvBytes.Load(),
		Dropped:      p.dropped.Load(),
		DroppedStale: p.droppedStale.Load(),
		Reconnects:   p.reconnects.Load(),
		DialFailures: p.dialFailures.Load(),
	}
}

// drop accounts for one message that will not be sent.
func (p *peer) drop(group uint64, snap bool) {
	p.dropped.Add(1)
	p.t.notify(evUnreachable, group, p.id)
	if snap {
		p.t.notify(evSnapFailed, group, p.id)
	}
}

func (p *peer) send(group uint64, m *raftpb.Message, dir uint64) {
	snap := m.GetType() == raftpb.MsgSnap
	if p.state.Load() == stateDown {
		p.drop(group, snap)
		return
	}
	// Check the limits before paying for marshaling.
	size := proto.Size(m)
	if n := framePrefixLen + size; n > int(p.maxFrame.Load()) {
		p.t.log.Warn("dropping message larger than the frame limit", "peer", p.id, "group", group,
			"type", m.GetType(), "bytes", n, "limit", p.maxFrame.Load())
		p.drop(group, snap)
		return
	}
	if p.queued.Load()+int64(frameOverheadLen+size) > int64(p.t.cfg.MaxQueuedBytes) {
		p.drop(group, snap)
		return
	}
	var bp *[]byte
	var sp []splice
	var err error
	if splices(m) {
		bp, sp, err = encodeSpliced(group, p.t.cfg.NodeID, m)
	} else {
		bp, err = encodeFrame(group, p.t.cfg.NodeID, m, size)
	}
	if err != nil {
		p.t.log.Error("cannot marshal raft message", "peer", p.id, "group", group, "type", m.GetType(), "err", err)
		p.drop(group, snap)
		return
	}
	f := frame{buf: bp, splices: sp, group: group, snap: snap, dir: dir}
	cost := f.cost()
	p.mu.Lock()
	if p.stopped || p.state.Load() == stateDown || p.qBytes+cost > int64(p.t.cfg.MaxQueuedBytes) {
		p.mu.Unlock()
		putBuf(bp)
		p.drop(group, snap)
		return
	}
	p.q = append(p.q, f)
	p.qBytes += cost
	p.queued.Store(p.qBytes)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take swaps the queue with spare (which must be empty) and returns it.
func (p *peer) take(spare []frame) []frame {
	p.mu.Lock()
	q := p.q
	p.q = spare[:0]
	p.mu.Unlock()
	return q
}

// release uncharges n bytes once their frames have been written or dropped.
func (p *peer) release(n int64) {
	p.mu.Lock()
	p.qBytes -= n
	p.queued.Store(p.qBytes)
	p.mu.Unlock()
}

// dropQueued drops everything queued; report says whether to notify.
func (p *peer) dropQueued(report bool) {
	q := p.take(nil)
	var n int64
	for _, f := range q {
		n += f.cost()
		if report {
			p.drop(f.group, f.snap)
		}
		putBuf(f.buf)
	}
	p.release(n)
}

func (p *peer) address() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	changed := p.addr != addr
	p.addr = addr
	p.mu.Unlock()
	if changed {
		select {
		case p.redial <- struct{}{}:
		default:
		}
	}
}

// stop makes the writer exit; it drops the queue on its way out.
func (p *peer) stop() {
	p.mu.Lock()
	p.stopped = true
	c := p.conn
	p.mu.Unlock()
	p.cancel()
	if c != nil {
		_ = c.Close()
	}
}

// sleep waits d, or until the address changes, or until stopped; it reports
// whether still running.
func (p *peer) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-p.redial:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// run is the writer goroutine: connect, stream, reconnect.
func (p *peer) run() {
	defer p.dropQueued(false)
	log := p.t.log.With("peer", p.id)
	backoff := p.t.cfg.MinBackoff
	connectedBefore := false
	for p.ctx.Err() == nil {
		// Drain a pending redial request: we are dialing the current address.
		select {
		case <-p.redial:
		default:
		}
		addr := p.address()
		c, d, err := p.dial(addr)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.dialFailures.Add(1)
			if p.state.Swap(stateDown) != stateDown {
				log.Warn("cannot connect to peer; dropping its messages until it is back", "addr", addr, "err", err)
			} else {
				log.Debug("cannot connect to peer", "addr", addr, "err", err)
			}
			p.dropQueued(true)
			if !p.sleep(p.t.jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, p.t.cfg.MaxBackoff)
			continue
		}
		if connectedBefore {
			p.reconnects.Add(1)
		}
		connectedBefore = true
		p.dir.Store(d.dir)
		p.state.Store(stateConnected)
		log.Info("connected to peer", "addr", addr)
		connectedAt := time.Now()
		err = p.stream(c, d)
		p.state.Store(stateConnecting)
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		_ = c.Close()
		if p.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRedial) {
			log.Info("peer address changed; reconnecting", "old", addr, "new", p.address())
			continue
		}
		log.Warn("stream to peer broken; reconnecting", "addr", addr, "err", err)
		// A peer that accepts and then drops us at once (for instance it
		// rejects our frames) must not make us spin: back off unless the
		// stream lived a while.
		if time.Since(connectedAt) < stableStream {
			if !p.sleep(p.t.jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, p.t.cfg.MaxBackoff)
		} else {
			backoff = p.t.cfg.MinBackoff
		}
	}
}

// dialed is what the handshake told of a stream: the data dir id the
// peer presented, and whether its frames go without a checksum (a TLS
// stream whose acceptor granted it: flagUnchecked).
type dialed struct {
	dir       uint64
	unchecked bool
}

// dial connects to addr and runs the handshake. The connection is
// published in p.conn so that stop can interrupt the handshake.
func (p *peer) dial(addr string) (net.Conn, dialed, error) {
	cfg := &p.t.cfg
	raw, err := cfg.Dialer.DialContext(p.ctx, "tcp", addr)
	if err != nil {
		return nil, dialed{}, err
	}
	c, err := p.t.secureDial(raw, p.id, alpnRaft)
	if err != nil {
		_ = raw.Close()
		return nil, dialed{}, err
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		_ = c.Close()
		return nil, dialed{}, errStopped
	}
	p.conn = c
	p.mu.Unlock()
	fail := func(err error) (net.Conn, dialed, error) {
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		_ = c.Close()
		return nil, dialed{}, err
	}
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	hs := handshake{
		Version:   protocolVersion,
		ClusterID: cfg.ClusterID,
		From:      cfg.NodeID,
		To:        p.id,
		MaxFrame:  uint32(cfg.MaxFrameBytes),
		DirID:     cfg.DirID,
	}
	if isTLS(c) {
		hs.Flags |= flagUnchecked // offered; used only if granted
	}
	if _, err := c.Write(hs.marshal()); err != nil {
		return fail(fmt.Errorf("writing handshake: %w", err))
	}
	reply, err := readHandshake(c)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fail(errors.New("handshake rejected by peer (see its log)"))
		}
		return fail(err)
	}
	if reply.Flags&flagRejected != 0 {
		return fail(&RejectedError{Peer: p.id, Reason: readReason(c)})
	}
	switch {
	case reply.Version != protocolVersion:
		return fail(fmt.Errorf("peer speaks protocol version %d, we speak %d", reply.Version, protocolVersion))
	case reply.ClusterID != cfg.ClusterID:
		return fail(fmt.Errorf("peer is in cluster %d, we are in %d", reply.ClusterID, cfg.ClusterID))
	case reply.From != p.id:
		return fail(fmt.Errorf("address %s is node %d, not node %d", addr, reply.From, p.id))
	case reply.To != cfg.NodeID:
		return fail(fmt.Errorf("handshake answer addressed to node %d, we are %d", reply.To, cfg.NodeID))
	}
	if cfg.CheckPeer != nil {
		if err := cfg.CheckPeer(p.id, reply.DirID); err != nil {
			return fail(err)
		}
	}
	p.maxFrame.Store(min(uint32(cfg.MaxFrameBytes), reply.MaxFrame))
	_ = c.SetDeadline(time.Time{})
	return c, dialed{dir: reply.DirID, unchecked: hs.Flags&reply.Flags&flagUnchecked != 0}, nil
}

// stream writes queued frames to c, whose end presented data dir d.dir,
// until an error, a stop or a redial. A frame meant for another data dir
// is dropped: it was decided for a process that is gone (frame.dir). Frames
// are checksummed here, as they are written, unless d.unchecked.
func (p *peer) stream(c net.Conn, d dialed) error {
	dir := d.dir
	// The stream is one-way; reading only detects the peer closing it.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	defer func() {
		_ = c.Close()
		<-closed
	}()

	bw := bufio.NewWriterSize(c, writeBufSize)
	bt := tlsbatch.WriterOf(c) // TLS records in batches (internal/tlsbatch)
	if bt != nil {
		bt.Gather()
	}
	var (
		spare        []frame
		pendFrames   uint64 // written to bw since the last flush
		pendBytes    uint64
		pendGroups   = make(map[uint64]struct{}) // groups with unflushed frames, for Unreachable
		pendSnaps    []uint64                    // groups of unflushed MsgSnaps
		warnedTooBig bool
		warnedStale  bool
	)
	failPending := func() {
		p.dropped.Add(pendFrames)
		for g := range pendGroups {
			p.t.notify(evUnreachable, g, p.id)
		}
		for _, g := range pendSnaps {
			p.t.notify(evSnapFailed, g, p.id)
		}
	}
	wt := p.t.cfg.WriteTimeout
	for {
		batch := p.take(spare)
		if len(batch) == 0 {
			spare = batch
			if pendFrames > 0 {
				_ = c.SetWriteDeadline(time.Now().Add(wt))
				err := bw.Flush()
				if err == nil && bt != nil {
					err = bt.Flush()
				}
				if err != nil {
					failPending()
					return err
				}
				p.sentFrames.Add(pendFrames)
				p.sentBytes.Add(pendBytes)
				for _, g := range pendSnaps {
					p.t.notify(evSnapDone, g, p.id)
				}
				pendFrames, pendBytes, pendSnaps = 0, 0, pendSnaps[:0]
				clear(pendGroups)
			}
			select {
			case <-p.signal:
				continue
			case <-p.ctx.Done():
				return errStopped
			case <-closed:
				return errPeerClosed
			case <-p.redial:
				return errRedial
			}
		}
		_ = c.SetWriteDeadline(time.Now().Add(wt))
		maxFrame := int(p.maxFrame.Load())
		var err error
		var cost int64
		for i, f := range batch {
			cost += f.cost()
			b := *f.buf
			switch {
			case err != nil:
				p.drop(f.group, f.snap)
			case f.dir != 0 && f.dir != dir && !canary.On(canary.QueueAnyDir):
				if !warnedStale {
					warnedStale = true
					p.t.log.Info("dropping messages queued for another data dir of the peer (it restarted on another disk)",
						"peer", p.id, "queued_for", fmt.Sprintf("%016x", f.dir), "presented", fmt.Sprintf("%016x", dir))
				}
				p.droppedStale.Add(1)
				p.drop(f.group, f.snap)
			case f.len()-frameHeaderLen > maxFrame:
				if !warnedTooBig {
					warnedTooBig = true
					p.t.log.Warn("dropping frames larger than the peer's frame limit", "peer", p.id, "bytes", f.len(), "limit", maxFrame)
				}
				p.drop(f.group, f.snap)
			default:
				if !d.unchecked {
					sealSpliced(b, f.splices)
				}
				err = writeFrame(bw, b, f.splices)
				pendFrames++
				pendBytes += uint64(f.len())
				pendGroups[f.group] = struct{}{}
				if f.snap {
					pendSnaps = append(pendSnaps, f.group)
				}
			}
			putBuf(f.buf)
			batch[i] = frame{}
		}
		spare = batch[:0]
		p.release(cost)
		if err != nil {
			failPending()
			return err
		}
	}
}
