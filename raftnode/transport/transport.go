// Package transport is the TCP transport between VDL servers. A server hosts
// many Raft groups; every server has one node id shared by all its groups.
// Between each ordered pair of servers there is one long-lived, one-way TCP
// stream (the sender dials, the receiver accepts) that multiplexes the
// messages of all groups as length-prefixed, CRC-checked frames; see frame.go
// for the wire format.
//
// Sending never blocks: Send marshals the message and appends it to the
// destination peer's queue, whose memory is bounded by MaxQueuedBytes. A
// message that does not fit, or that is sent while the peer is known to be
// down, is dropped and reported through Unreachable, as Raft tolerates message
// loss. One writer goroutine per peer drains the queue into buffered writes
// (many frames per syscall, flushed when the queue is empty) and reconnects
// with jittered exponential backoff. One reader goroutine per accepted stream
// decodes frames and hands them to Handler; any protocol violation closes that
// stream with a logged reason.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vdl-project/vdl/rng"
	"go.etcd.io/raft/v3/raftpb"
)

// Defaults for zero Config fields.
const (
	DefaultMaxFrameBytes    = 32 << 20
	DefaultMaxQueuedBytes   = 64 << 20
	DefaultDialTimeout      = 3 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultMinBackoff       = 50 * time.Millisecond
	DefaultMaxBackoff       = 2 * time.Second
)

// Config configures a Transport.
type Config struct {
	// NodeID is this server's node id (non-zero), the same in every group.
	NodeID uint64
	// ClusterID must match on both ends of every stream.
	ClusterID uint64
	// DirID identifies this server's data dir; it is sent in every
	// handshake for CheckPeer on the other end.
	DirID uint64
	// CheckPeer, if set, accepts or refuses a peer by the data dir id it
	// presents, on both ends of a stream; the error is the reason sent to
	// (or reported by) the other end. Called from transport goroutines.
	CheckPeer func(node, dirID uint64) error
	// Listener accepts streams from peers; the Transport owns it and closes
	// it on Close. If nil, ListenAddr is listened on by Start; if both are
	// empty the Transport only sends.
	Listener   net.Listener
	ListenAddr string
	// Peers is the initial address book: node id -> "host:port". An entry for
	// NodeID itself is ignored. Only peers in the book may connect to us.
	Peers map[uint64]string
	// Handler is called for every received message, from the stream's reader
	// goroutine, so messages of one sender arrive in send order. It owns m.
	// It must not block long: a blocked Handler stalls that sender's stream.
	Handler func(group uint64, m *raftpb.Message)
	// Unreachable, if set, is told that messages of group to peer were
	// dropped (peer down, queue full, unknown peer, message too large).
	// Calls are coalesced and made from a transport goroutine, never from
	// inside Send, so it may call into Raft (RawNode.ReportUnreachable).
	Unreachable func(group, peer uint64)
	// SnapshotStatus, if set, is told the fate of each MsgSnap: failed=true
	// when it was dropped, false once it was written to the peer's socket
	// (for RawNode.ReportSnapshot). Same calling rules as Unreachable.
	SnapshotStatus func(group, peer uint64, failed bool)
	// MaxFrameBytes bounds one frame (group, from and the encoded message);
	// larger messages are dropped on send and larger frames close the
	// receiving stream. Default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// MaxQueuedBytes bounds the memory of each peer's queue, including the
	// batch being written. Raised to MaxFrameBytes+8 if smaller. Default
	// DefaultMaxQueuedBytes.
	MaxQueuedBytes int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Dialer for outgoing streams; default Timeout DefaultDialTimeout and
	// KeepAlive 15s.
	Dialer *net.Dialer
	// HandshakeTimeout bounds the handshake on both ends.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one batched write; a peer that does not read for
	// this long has its stream closed and reconnected.
	WriteTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// between failed connection attempts.
	MinBackoff, MaxBackoff time.Duration
	// Rand supplies the backoff jitter; default rng.New(NodeID, "raft-transport").
	Rand rng.Rand

	// TLSServer, TLSClient and PeerID make every connection mutual TLS
	// (secure.go): the acceptor presents TLSServer's certificate and
	// requires a client certificate signed by its ClientCAs; the dialer
	// uses TLSClient(peer), which must verify that the certificate is that
	// peer's; PeerID reads the node id from a verified certificate, and a
	// stream claiming another sender is refused. All nil: plain TCP (the
	// server allows it only when told so, insecure_peers).
	TLSServer *tls.Config
	TLSClient func(peer uint64) *tls.Config
	PeerID    func(cert *x509.Certificate) (uint64, bool)
	// HTTP, if set, serves the peers' HTTP requests (snapshot entry
	// copies) on the same listener; DialHTTP connects to a peer's.
	HTTP http.Handler
}

// RejectedError: a peer refused our stream, for Reason.
type RejectedError struct {
	Peer   uint64
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("node %d refuses our stream: %s", e.Peer, e.Reason)
}

// PeerStats describes one peer of the address book.
type PeerStats struct {
	Addr         string
	Connected    bool   // our outgoing stream to the peer is established
	Dir          uint64 // the data dir id the peer presented at that stream's handshake (0: not connected)
	Inbound      bool   // the peer's stream to us is established
	QueuedBytes  int64  // bytes queued or being written to the peer
	SentFrames   uint64
	SentBytes    uint64 // wire bytes, frame headers included
	RecvFrames   uint64
	RecvBytes    uint64
	Dropped      uint64 // messages to the peer that were dropped
	DroppedStale uint64 // of which queued for a data dir the peer no longer presents (SendTo)
	Reconnects   uint64 // outgoing streams established after the first
	DialFailures uint64 // failed connection attempts (dial or handshake)
}

// Transport is the multi-group Raft transport of one server.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	peers atomic.Pointer[map[uint64]*peer] // copy-on-write, written under mu

	mu      sync.Mutex
	started bool
	closed  bool
	ln      net.Listener
	conns   map[net.Conn]struct{} // accepted connections, for Close
	inbound map[uint64]*inConn    // current established stream per sender
	httpLn  *connListener         // peers' HTTP connections (Config.HTTP)
	httpSrv *http.Server

	randMu sync.Mutex

	evMu     sync.Mutex
	events   map[event]struct{}
	evSignal chan struct{}

	wg sync.WaitGroup
}

// New returns a Transport configured by cfg. Nothing runs until Start.
func New(cfg Config) *Transport {
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.MaxFrameBytes > 1<<31 {
		cfg.MaxFrameBytes = 1 << 31
	}
	if cfg.MaxQueuedBytes <= 0 {
		cfg.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if cfg.MaxQueuedBytes < cfg.MaxFrameBytes+frameHeaderLen {
		cfg.MaxQueuedBytes = cfg.MaxFrameBytes + frameHeaderLen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 15 * time.Second}
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Rand == nil {
		cfg.Rand = rng.New(cfg.NodeID, "raft-transport")
	}
	t := &Transport{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "raft-transport", "node", cfg.NodeID),
		conns:    make(map[net.Conn]struct{}),
		inbound:  make(map[uint64]*inConn),
		events:   make(map[event]struct{}),
		evSignal: make(chan struct{}, 1),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	m := make(map[uint64]*peer, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		if id != cfg.NodeID && id != 0 {
			m[id] = newPeer(t, id, addr)
		}
	}
	t.peers.Store(&m)
	return t
}

// Start listens (if configured), and starts the accept loop, the per-peer
// writers and the notifier. It may be called once.
func (t *Transport) Start() error {
	if t.cfg.NodeID == 0 {
		return errors.New("transport: NodeID must be non-zero")
	}
	if t.cfg.Handler == nil {
		return errors.New("transport: Handler is required")
	}
	if (t.cfg.TLSServer == nil) != (t.cfg.TLSClient == nil) || (t.cfg.TLSServer != nil && t.cfg.PeerID == nil) {
		return errors.New("transport: TLSServer, TLSClient and PeerID go together")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("transport: closed")
	}
	if t.started {
		return errors.New("transport: already started")
	}
	ln := t.cfg.Listener
	if ln == nil && t.cfg.ListenAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", t.cfg.ListenAddr); err != nil {
			return fmt.Errorf("transport: listen: %w", err)
		}
	}
	t.started = true
	t.ln = ln
	if ln != nil {
		if t.cfg.HTTP != nil {
			t.startHTTP(ln.Addr())
		}
		t.wg.Add(1)
		go t.acceptLoop(ln)
	}
	t.wg.Add(1)
	go t.notifier()
	for _, p := range *t.peers.Load() {
		t.startPeer(p)
	}
	return nil
}

// Addr returns the listener's address, or nil.
func (t *Transport) Addr() net.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln != nil {
		return t.ln.Addr()
	}
	if t.cfg.Listener != nil {
		return t.cfg.Listener.Addr()
	}
	return nil
}

// startPeer runs p's writer; t.mu held.
func (t *Transport) startPeer(p *peer) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.run()
	}()
}

// Send queues m for m.GetTo() in the given group and returns at once. m is
// marshaled before Send returns, so the caller may reuse it. The message is
// dropped (and Unreachable told) if the peer is unknown or down, if the
// peer's queue is full, or if the frame would exceed MaxFrameBytes.
func (t *Transport) Send(group uint64, m *raftpb.Message) { t.SendTo(group, m, 0) }

// SendTo is Send for a message meant for the peer's data dir dir (0: any).
// The queue outlives connections — a message queued while the stream is
// down goes out on the next one — and the process at the other end of the
// next one may have restarted on an empty data dir: what the sender decided
// for the old one (a heartbeat committing what the old disk acknowledged) is
// not for it. Such a message is dropped (and Unreachable told) when the
// stream it would go out on was opened to another data dir.
func (t *Transport) SendTo(group uint64, m *raftpb.Message, dir uint64) {
	to := m.GetTo()
	p := (*t.peers.Load())[to]
	if p == nil {
		if to != t.cfg.NodeID {
			t.log.Debug("dropping message to unknown peer", "peer", to, "group", group, "type", m.GetType())
			t.notify(evUnreachable, group, to)
		}
		return
	}
	p.send(group, m, dir)
}

// SetPeer adds peer id at addr to the address book, or changes its address
// (its outgoing stream is then re-established to the new address).
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == t.cfg.NodeID || id == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	old := *t.peers.Load()
	if p := old[id]; p != nil {
		p.setAddr(addr)
		return
	}
	m := make(map[uint64]*peer, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	p := newPeer(t, id, addr)
	m[id] = p
	t.peers.Store(&m)
	if t.started {
		t.startPeer(p)
	}
}

// RemovePeer removes peer id: its queue is dropped, its outgoing stream and
// its stream to us are closed, and it may no longer connect.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	old := *t.peers.Load()
	p := old[id]
	if p == nil {
		t.mu.Unlock()
		return
	}
	m := make(map[uint64]*peer, len(old))
	for k, v := range old {
		if k != id {
			m[k] = v
		}
	}
	t.peers.Store(&m)
	ic := t.inbound[id]
	t.mu.Unlock()
	p.stop()
	if ic != nil {
		ic.close("peer removed")
	}
}

// Stats returns per-peer statistics keyed by node id.
func (t *Transport) Stats() map[uint64]PeerStats {
	peers := *t.peers.Load()
	out := make(map[uint64]PeerStats, len(peers))
	for id, p := range peers {
		out[id] = p.stats()
	}
	return out
}

// Close stops the transport: closes the listener and all streams, drops all
// queues, and waits for every goroutine. Handler, Unreachable and
// SnapshotStatus are not called after Close returns. Close is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	t.cancel()
	ln := t.ln
	if ln == nil {
		ln = t.cfg.Listener
	}
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	peers := *t.peers.Load()
	t.mu.Unlock()

	var err error
	if ln != nil {
		if cerr := ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
	}
	if t.httpSrv != nil {
		_ = t.httpLn.Close()
		_ = t.httpSrv.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
	for _, p := range peers {
		p.stop()
	}
	t.wg.Wait()
	return err
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// jitter returns a duration uniformly in [d/2, d].
func (t *Transport) jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	t.randMu.Lock()
	defer t.randMu.Unlock()
	return d/2 + time.Duration(t.cfg.Rand.Int64N(int64(d/2)+1))
}

// Callback events, coalesced so that their memory is bounded by the number of
// distinct (kind, group, peer) triples and callbacks never run inside Send.
type eventKind uint8

const (
	evUnreachable eventKind = iota
	evSnapFailed
	evSnapDone
)

type event struct {
	kind        eventKind
	group, peer uint64
}

func (t *Transport) notify(kind eventKind, group, peer uint64) {
	switch kind {
	case evUnreachable:
		if t.cfg.Unreachable == nil {
			return
		}
	default:
		if t.cfg.SnapshotStatus == nil {
			return
		}
	}
	t.evMu.Lock()
	t.events[event{kind, group, peer}] = struct{}{}
	t.evMu.Unlock()
	select {
	case t.evSignal <- struct{}{}:
	default:
	}
}

func (t *Transport) notifier() {
	defer t.wg.Done()
	spare := make(map[event]struct{})
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.evSignal:
		}
		t.evMu.Lock()
		evs := t.events
		t.events = spare
		t.evMu.Unlock()
		for ev := range evs {
			if t.ctx.Err() != nil {
				return
			}
			switch ev.kind {
			case evUnreachable:
				t.cfg.Unreachable(ev.group, ev.peer)
			case evSnapFailed:
				t.cfg.SnapshotStatus(ev.group, ev.peer, true)
			case evSnapDone:
				t.cfg.SnapshotStatus(ev.group, ev.peer, false)
			}
		}
		clear(evs)
		spare = evs
	}
}
