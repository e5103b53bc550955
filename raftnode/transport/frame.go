package transport

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Wire format (all integers big-endian).
//
// Handshake, sent once by the dialer right after connecting, and answered by
// the acceptor with the same structure (From/To swapped) if it accepts the
// stream. A rejected stream is answered with the rejected flag and a reason
// (u16 length, then that many bytes of text, at most maxReasonLen), then
// closed.
//
//	offset size field
//	0      4    magic "VDLR"
//	4      2    protocol version (2)
//	6      2    flags: 1 = rejected (a reason follows); 2 = unchecked (below)
//	8      8    cluster id
//	16     8    from: node id of the sender of this handshake
//	24     8    to: node id the sender believes it is talking to
//	32     4    max frame bytes the sender of this handshake accepts
//	36     8    data dir id of the sender (see Config.DirID)
//
// After the handshake the dialer sends frames; the stream is one-way (the
// acceptor never writes after its handshake answer). Each frame is
//
//	offset size field
//	0      4    length L: bytes after this 8-byte header (16 + len(payload))
//	4      4    CRC-32C (Castagnoli) of those L bytes
//	8      8    raft group id
//	16     8    from: sender node id (must equal the handshake's from)
//	24     L-16 payload: protobuf-encoded raftpb.Message
//
// L must be in [16, MaxFrameBytes]; the receiver checks it before allocating.
//
// Unchecked streams: on a TLS stream the dialer offers the unchecked flag
// and the acceptor grants it by setting it in its answer (only if its end
// is TLS too); the stream's frames then carry 0 for a CRC, which the
// receiver does not check. TLS (AES-GCM) already authenticates every byte,
// so the CRC caught nothing there and cost the leader 6% of its CPU, once
// per follower. A peer that does not know the flag neither grants it nor
// asks for it: its streams stay checksummed both ways (rolling upgrades).
const (
	handshakeMagic   = "VDLR"
	protocolVersion  = 2
	handshakeLen     = 44
	flagRejected     = 1
	flagUnchecked    = 2
	maxReasonLen     = 1024
	frameHeaderLen   = 8  // length + crc
	framePrefixLen   = 16 // group + from, covered by the crc
	frameOverheadLen = frameHeaderLen + framePrefixLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type handshake struct {
	Version   uint16
	Flags     uint16
	ClusterID uint64
	From      uint64
	To        uint64
	MaxFrame  uint32
	DirID     uint64
}

func (h handshake) marshal() []byte {
	b := make([]byte, handshakeLen)
	copy(b, handshakeMagic)
	binary.BigEndian.PutUint16(b[4:], h.Version)
	binary.BigEndian.PutUint16(b[6:], h.Flags)
	binary.BigEndian.PutUint64(b[8:], h.ClusterID)
	binary.BigEndian.PutUint64(b[16:], h.From)
	binary.BigEndian.PutUint64(b[24:], h.To)
	binary.BigEndian.PutUint32(b[32:], h.MaxFrame)
	binary.BigEndian.PutUint64(b[36:], h.DirID)
	return b
}

// rejection is the answer to a handshake that is refused.
func rejection(clusterID, from, to uint64, reason string) []byte {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b := handshake{Version: protocolVersion, Flags: flagRejected, ClusterID: clusterID, From: from, To: to}.marshal()
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// readReason reads the reason that follows a rejected handshake.
func readReason(r io.Reader) string {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "(no reason given)"
	}
	b := make([]byte, min(int(binary.BigEndian.Uint16(n[:])), maxReasonLen))
	k, _ := io.ReadFull(r, b)
	return string(b[:k])
}

// readHandshake reads one handshake. The magic is checked before the rest is
// read so that a foreign protocol is rejected at once.
func readHandshake(r io.Reader) (handshake, error) {
	var b [handshakeLen]byte
	if _, err := io.ReadFull(r, b[:4]); err != nil {
		return handshake{}, fmt.Errorf("reading handshake: %w", err)
	}
	if string(b[:4]) != handshakeMagic {
		return handshake{}, fmt.Errorf("bad handshake magic %q", b[:4])
	}
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return handshake{}, fmt.Errorf("reading handshake: %w", err)
	}
	return handshake{
		Version:   binary.BigEndian.Uint16(b[4:]),
		Flags:     binary.BigEndian.Uint16(b[6:]),
		ClusterID: binary.BigEndian.Uint64(b[8:]),
		From:      binary.BigEndian.Uint64(b[16:]),
		To:        binary.BigEndian.Uint64(b[24:]),
		MaxFrame:  binary.BigEndian.Uint32(b[32:]),
		DirID:     binary.BigEndian.Uint64(b[36:]),
	}, nil
}

// encodeFrame marshals m, whose proto.Size is size, into a frame in a
// buffer from the pool, complete but for its CRC (sealFrame: the stream it
// goes out on decides).
func encodeFrame(group, from uint64, m *raftpb.Message, size int) (*[]byte, error) {
	bp := getBuf(frameOverheadLen + size)
	b := (*bp)[:frameOverheadLen]
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		putBuf(bp)
		return nil, err
	}
	putFrameHeader(b, group, from, len(b))
	*bp = b
	return bp, nil
}

// putFrameHeader fills in the header and prefix of a frame of n bytes in
// all; its CRC is left zero.
func putFrameHeader(b []byte, group, from uint64, n int) {
	binary.BigEndian.PutUint64(b[8:], group)
	binary.BigEndian.PutUint64(b[16:], from)
	binary.BigEndian.PutUint32(b[0:], uint32(n-frameHeaderLen))
	putCRC(b, 0) // the pooled buffer held another frame's
}

// sealFrame puts the CRC into an encoded frame.
func sealFrame(b []byte) {
	putCRC(b, crc32.Checksum(b[frameHeaderLen:], castagnoli))
}

func putCRC(b []byte, crc uint32) { binary.BigEndian.PutUint32(b[4:], crc) }

// isTLS says whether c is a TLS connection.
func isTLS(c net.Conn) bool {
	_, ok := c.(*tls.Conn)
	return ok
}

// frameError is a protocol violation that must close the connection.
type frameError struct{ reason string }

func (e *frameError) Error() string { return e.reason }

func protoErr(format string, args ...any) error {
	return &frameError{reason: fmt.Sprintf(format, args...)}
}

// frameReader reads frames from a stream, reusing its body buffer.
type frameReader struct {
	r         io.Reader
	maxFrame  uint32
	unchecked bool // the stream's frames carry no CRC (flagUnchecked)
	hdr       [frameHeaderLen]byte
	buf       []byte
}

// maxRetainedBuf is the largest body buffer kept between frames; a larger
// one is dropped after use so it is not pinned. It holds an append of the
// largest entry a server makes (max_entry_bytes, 8 MiB by default) and the
// frame's own bytes around it. At 1 MiB, every append of an entry of
// 1 MiB or more (kafka-go's default batch is 1 MiB) dropped the buffer
// and grew a new one from 4 KiB, doubling: 3 MiB allocated and zeroed and
// 2 MiB copied per frame, two thirds of the CPU of streaming such appends
// (BenchmarkTLSAppends). A stream holds it only once such a frame's bytes
// arrived (readBody grows with them).
const maxRetainedBuf = 9 << 20

// next reads one frame. The returned payload is valid until the next call.
// io.EOF is returned only at a clean frame boundary.
func (fr *frameReader) next() (group, from uint64, payload []byte, err error) {
	if cap(fr.buf) > maxRetainedBuf {
		fr.buf = nil
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[0:])
	sum := binary.BigEndian.Uint32(fr.hdr[4:])
	if n > fr.maxFrame {
		return 0, 0, nil, protoErr("frame length %d exceeds MaxFrameBytes %d", n, fr.maxFrame)
	}
	if n < framePrefixLen {
		return 0, 0, nil, protoErr("frame length %d shorter than the %d-byte frame prefix", n, framePrefixLen)
	}
	body, err := fr.readBody(int(n))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	if fr.unchecked {
		// TLS authenticated the bytes.
	} else if got := crc32.Checksum(body, castagnoli); got != sum {
		return 0, 0, nil, protoErr("frame crc mismatch: header %#08x, computed %#08x", sum, got)
	}
	return binary.BigEndian.Uint64(body[0:]), binary.BigEndian.Uint64(body[8:]), body[framePrefixLen:], nil
}

// readBody reads n bytes into the reusable buffer, growing it as the
// bytes arrive: a frame announcing MaxFrameBytes costs what was sent.
func (fr *frameReader) readBody(n int) ([]byte, error) {
	if cap(fr.buf) >= n {
		body := fr.buf[:n]
		_, err := io.ReadFull(fr.r, body)
		return body, err
	}
	body := fr.buf[:0]
	for len(body) < n {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(max(2*cap(body), 4096), n))
			copy(grown, body)
			body = grown
		}
		k, err := fr.r.Read(body[len(body):cap(body)])
		body = body[:len(body)+k]
		if err != nil && len(body) < n {
			return nil, err
		}
	}
	fr.buf = body
	return body, nil
}

// Frame buffers come from power-of-two size classes (256 B .. 8 MiB) so that
// a buffer's capacity is at most twice its length; queue accounting charges
// the capacity, so the byte bound covers the memory really held. Larger frames
// are allocated exactly and not pooled. The classes reach 8 MiB because the
// common large frame is an append of one Kafka produce request (franz-go's
// default batches are 1 MB): with classes up to 64 KiB each such append was
// a fresh buffer, allocated and zeroed for each follower (7 % of a leader's
// CPU producing 1 KiB records on defaults, BenchmarkProduceDefaults' profile).
const (
	minPoolShift = 8
	maxPoolShift = 23
)

var bufPools [maxPoolShift - minPoolShift + 1]sync.Pool

func poolClass(n int) int {
	c := 0
	for (1 << (minPoolShift + c)) < n {
		c++
	}
	return c
}

func getBuf(n int) *[]byte {
	if n > 1<<maxPoolShift {
		b := make([]byte, 0, n)
		return &b
	}
	c := poolClass(n)
	if v := bufPools[c].Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 0, 1<<(minPoolShift+c))
	return &b
}

func putBuf(bp *[]byte) {
	c := cap(*bp)
	if c > 1<<maxPoolShift || c < 1<<minPoolShift || c&(c-1) != 0 {
		return
	}
	*bp = (*bp)[:0]
	bufPools[poolClass(c)].Put(bp)
}
