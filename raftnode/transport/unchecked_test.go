package transport

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"hash/crc32"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/internal/pki"
)

// A frame is sealed by the stream it goes out on: a checked reader takes
// it only sealed, an unchecked one (a TLS stream that agreed to it) as it
// was encoded.
func TestFrameSealedByItsStream(t *testing.T) {
	m := msg(raftpb.MsgApp, 1, 2, 42, []byte("hello"))
	bp, err := encodeFrame(9, 1, m, proto.Size(m))
	require.NoError(t, err)
	b := *bp
	require.Zero(t, binary.BigEndian.Uint32(b[4:]), "no CRC until sealed")

	fr := frameReader{r: bytes.NewReader(b), maxFrame: 1 << 20}
	_, _, _, err = fr.next()
	require.ErrorContains(t, err, "frame crc mismatch", "a checked stream refuses an unsealed frame")

	fr = frameReader{r: bytes.NewReader(b), maxFrame: 1 << 20, unchecked: true}
	group, _, payload, err := fr.next()
	require.NoError(t, err)
	require.Equal(t, uint64(9), group)
	got := new(raftpb.Message)
	require.NoError(t, proto.Unmarshal(payload, got))
	require.True(t, proto.Equal(m, got))

	sealFrame(b)
	require.Equal(t, crc32.Checksum(b[8:], castagnoli), binary.BigEndian.Uint32(b[4:]))
	fr = frameReader{r: bytes.NewReader(b), maxFrame: 1 << 20}
	_, _, _, err = fr.next()
	require.NoError(t, err)
}

// A TLS dialer offers unchecked frames and sends them so only when the
// acceptor grants it: an acceptor that does not (a peer from before the
// flag, or one whose end is not TLS) gets checksummed frames.
func TestUncheckedOnlyWhenGranted(t *testing.T) {
	p := newTestPKI(t, 1, 2)
	for _, grant := range []bool{false, true} {
		ln := listen(t)
		a := startNode(t, 1, listen(t), map[uint64]string{2: ln.Addr().String()}, p.secure(1))
		a.Send(1, msg(raftpb.MsgHeartbeat, 1, 2, 1, nil))

		raw, err := ln.Accept()
		require.NoError(t, err)
		c := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{p.nodes[2]}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: p.pool, NextProtos: []string{alpnRaft}, MinVersion: tls.VersionTLS13})
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(waitFor))
		hs, err := readHandshake(c)
		require.NoError(t, err)
		require.NotZero(t, hs.Flags&flagUnchecked, "offered on TLS")
		reply := handshake{Version: protocolVersion, ClusterID: testCluster, From: 2, To: 1, MaxFrame: 1 << 20}
		if grant {
			reply.Flags = flagUnchecked
		}
		_, err = c.Write(reply.marshal())
		require.NoError(t, err)

		r := bufio.NewReader(c)
		hdr, err := r.Peek(frameHeaderLen)
		require.NoError(t, err)
		if grant {
			require.Zero(t, binary.BigEndian.Uint32(hdr[4:]), "granted: no CRC")
		} else {
			require.NotZero(t, binary.BigEndian.Uint32(hdr[4:]), "not granted: checksummed")
		}
		fr := frameReader{r: r, maxFrame: 1 << 20} // checked: a sealed frame passes
		if grant {
			fr.unchecked = true
		}
		_, _, payload, err := fr.next()
		require.NoError(t, err)
		got := new(raftpb.Message)
		require.NoError(t, proto.Unmarshal(payload, got))
		require.Equal(t, raftpb.MsgHeartbeat, got.GetType())
	}
}

// The acceptor grants unchecked frames on a TLS stream and takes them
// unsealed; a plaintext acceptor does not grant it, and an unsealed frame
// sent anyway closes the stream undelivered.
func TestAcceptorGrantsUncheckedOnTLSOnly(t *testing.T) {
	p := newTestPKI(t, 1, 2)
	frame := func() []byte {
		m := msg(raftpb.MsgHeartbeat, 1, 2, 7, nil)
		bp, err := encodeFrame(5, 1, m, proto.Size(m))
		require.NoError(t, err)
		return *bp // unsealed
	}
	offer := handshake{Version: protocolVersion, ClusterID: testCluster, From: 1, To: 2, MaxFrame: 1 << 20, Flags: flagUnchecked}

	// Node 2 alone: node 1 is the test (a real node 1 would supersede
	// its stream).
	book := map[uint64]string{1: "127.0.0.1:1"}
	secure := startNode(t, 2, listen(t), book, p.secure(2))
	cert := p.nodes[1]
	c, err := dialRaw(t, secure.addr, p.pool, &cert, pki.NodeName(2))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(offer.marshal())
	require.NoError(t, err)
	reply, err := readHandshake(c)
	require.NoError(t, err)
	require.NotZero(t, reply.Flags&flagUnchecked, "granted on TLS")
	_, err = c.Write(frame())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(secure.recv.from(1)) == 1 }, waitFor, time.Millisecond)

	plain := startNode(t, 2, listen(t), book)
	pc, err := net.DialTimeout("tcp", plain.addr, waitFor)
	require.NoError(t, err)
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(waitFor))
	_, err = pc.Write(offer.marshal())
	require.NoError(t, err)
	reply, err = readHandshake(pc)
	require.NoError(t, err)
	require.Zero(t, reply.Flags&flagUnchecked, "not granted in plaintext")
	_, err = pc.Write(frame())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return plain.logs.contains("frame crc mismatch") }, waitFor, time.Millisecond)
	require.Empty(t, plain.recv.from(1))
}
