package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/tlsbatch"
)

const readBufSize = 64 << 10

// inConn is an established stream from a peer to us.
type inConn struct {
	c      net.Conn
	peer   *peer
	reason atomic.Pointer[string] // why we closed it ourselves, if we did
}

func (ic *inConn) close(reason string) {
	ic.reason.CompareAndSwap(nil, &reason)
	_ = ic.c.Close()
}

func (t *Transport) acceptLoop(ln net.Listener) {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off and retry.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-t.ctx.Done():
				return
			}
		}
		delay = 0
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(c)
	}
}

// serve runs one accepted connection: handshake, then the read loop.
func (t *Transport) serve(raw net.Conn) {
	defer t.wg.Done()
	c := raw
	handed := false
	defer func() {
		if handed {
			return
		}
		_ = c.Close()
		t.mu.Lock()
		delete(t.conns, raw)
		t.mu.Unlock()
	}()
	remote := c.RemoteAddr().String()
	sc, certID, isHTTP, err := t.secureAccept(c)
	if err != nil {
		if t.ctx.Err() == nil {
			t.log.Warn("rejecting connection", "remote", remote, "reason", err.Error())
		}
		return
	}
	if isHTTP {
		if t.cfg.HTTP != nil && t.httpLn.hand(sc) {
			t.mu.Lock()
			delete(t.conns, raw) // the HTTP server owns it now
			t.mu.Unlock()
			handed = true
		}
		return
	}
	c = sc
	p, unchecked, err := t.acceptHandshake(c, certID)
	if err != nil {
		if t.ctx.Err() == nil {
			t.log.Warn("rejecting raft stream", "remote", remote, "peer", p, "reason", err.Error())
		}
		return
	}
	if br, ok := tlsbatch.Under(c).(*tlsbatch.Reader); ok {
		br.Batch() // the peer is authenticated: read its records in batches
	}
	t.mu.Lock()
	pr := (*t.peers.Load())[p] // under mu: RemovePeer cannot slip in between
	if t.closed || pr == nil {
		t.mu.Unlock()
		return
	}
	ic := &inConn{c: c, peer: pr}
	old := t.inbound[p]
	t.inbound[p] = ic
	t.mu.Unlock()
	if old != nil {
		old.close("superseded by a newer stream from the same peer")
	}
	pr.inbound.Add(1)
	defer func() {
		pr.inbound.Add(-1)
		t.mu.Lock()
		if t.inbound[p] == ic {
			delete(t.inbound, p)
		}
		t.mu.Unlock()
	}()
	t.log.Info("accepted raft stream", "peer", p, "remote", remote)

	err = t.readLoop(c, pr, unchecked)
	switch {
	case t.ctx.Err() != nil:
	case ic.reason.Load() != nil:
		t.log.Info("closed raft stream", "peer", p, "remote", remote, "reason", *ic.reason.Load())
	case errors.Is(err, io.EOF):
		t.log.Info("peer closed raft stream", "peer", p, "remote", remote)
	default:
		t.log.Warn("closing raft stream", "peer", p, "remote", remote, "reason", err.Error())
	}
}

// acceptHandshake validates the dialer's handshake and answers it: with
// our own, or with a rejection naming the reason. It returns the sender's
// node id (as claimed, for logging, even on error) and whether the
// stream's frames go unchecked (offered by the dialer, granted here on a
// TLS stream).
func (t *Transport) acceptHandshake(c net.Conn, certID uint64) (uint64, bool, error) {
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	hs, err := readHandshake(c)
	if err != nil {
		return 0, false, err
	}
	err = t.checkHandshake(hs)
	if err == nil && t.cfg.TLSServer != nil && hs.From != certID {
		err = fmt.Errorf("the stream claims to come from node %d, but its certificate is node %d's", hs.From, certID)
	}
	if err != nil {
		_, _ = c.Write(rejection(t.cfg.ClusterID, t.cfg.NodeID, hs.From, err.Error()))
		return hs.From, false, err
	}
	reply := handshake{
		Version:   protocolVersion,
		ClusterID: t.cfg.ClusterID,
		From:      t.cfg.NodeID,
		To:        hs.From,
		MaxFrame:  uint32(t.cfg.MaxFrameBytes),
		DirID:     t.cfg.DirID,
	}
	if hs.Flags&flagUnchecked != 0 && isTLS(c) {
		reply.Flags |= flagUnchecked
	}
	if _, err := c.Write(reply.marshal()); err != nil {
		return hs.From, false, fmt.Errorf("writing handshake answer: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return hs.From, reply.Flags&flagUnchecked != 0, nil
}

func (t *Transport) checkHandshake(hs handshake) error {
	switch {
	case hs.Version != protocolVersion:
		return fmt.Errorf("unsupported protocol version %d (we speak %d)", hs.Version, protocolVersion)
	case hs.ClusterID != t.cfg.ClusterID:
		return fmt.Errorf("cluster id mismatch: peer is in cluster %d, we are in %d", hs.ClusterID, t.cfg.ClusterID)
	case hs.To != t.cfg.NodeID:
		return fmt.Errorf("stream is addressed to node %d but this is node %d (mis-wired address book?)", hs.To, t.cfg.NodeID)
	case hs.From == t.cfg.NodeID || hs.From == 0:
		return fmt.Errorf("invalid sender node id %d", hs.From)
	case (*t.peers.Load())[hs.From] == nil:
		return fmt.Errorf("unknown sender node %d (not in the address book)", hs.From)
	}
	if t.cfg.CheckPeer != nil {
		return t.cfg.CheckPeer(hs.From, hs.DirID)
	}
	return nil
}

// readLoop reads frames from peer p until an error, and hands each message to
// the Handler. Any protocol violation is returned as an error.
func (t *Transport) readLoop(c net.Conn, p *peer, unchecked bool) error {
	fr := frameReader{r: bufio.NewReaderSize(c, readBufSize), maxFrame: uint32(t.cfg.MaxFrameBytes), unchecked: unchecked}
	for {
		group, from, payload, err := fr.next()
		if err != nil {
			return err
		}
		if from != p.id {
			return fmt.Errorf("frame claims sender node %d on the stream of node %d", from, p.id)
		}
		m := new(raftpb.Message)
		if err := proto.Unmarshal(payload, m); err != nil {
			return fmt.Errorf("cannot decode raft message (group %d): %v", group, err)
		}
		if to := m.GetTo(); to != t.cfg.NodeID {
			return fmt.Errorf("message for node %d arrived at node %d (group %d)", to, t.cfg.NodeID, group)
		}
		if f := m.GetFrom(); f != p.id {
			return fmt.Errorf("message claims sender node %d on the stream of node %d (group %d)", f, p.id, group)
		}
		p.recvFrames.Add(1)
		p.recvBytes.Add(uint64(frameOverheadLen + len(payload)))
		t.cfg.Handler(group, m)
	}
}
