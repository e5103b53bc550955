package transport

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzHandshake: any bytes on the raft port's handshake are decoded or
// refused, never a panic; a handshake that decodes re-encodes to the same
// bytes.
func FuzzHandshake(f *testing.F) {
	f.Add(handshake{Version: protocolVersion, ClusterID: 1, From: 1, To: 2, MaxFrame: 1 << 20, DirID: 9}.marshal())
	f.Add(rejection(1, 2, 1, "no"))
	f.Add([]byte("VDLR"))
	f.Add([]byte("GET / HTTP/1.1\\r\\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := readHandshake(bytes.NewReader(b))
		if err != nil {
			return
		}
		require.Equal(t, b[:handshakeLen], hs.marshal())
		_ = readReason(bytes.NewReader(b[handshakeLen:]))
	})
}

// frameOf encodes one frame the way a peer does.
func frameOf(group, from uint64, m *raftpb.Message) []byte {
	payload, _ := proto.Marshal(m)
	b := make([]byte, frameOverheadLen, frameOverheadLen+len(payload))
	b = append(b, payload...)
	binary.BigEndian.PutUint64(b[8:], group)
	binary.BigEndian.PutUint64(b[16:], from)
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-frameHeaderLen))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[frameHeaderLen:], castagnoli))
	return b
}

// FuzzFrameReader: a stream of arbitrary bytes yields frames, a protocol
// error or an end, never a panic; the reader never holds much more than it
// was sent (a frame announcing MaxFrameBytes costs what arrived).
func FuzzFrameReader(f *testing.F) {
	f.Add(frameOf(1, 2, msg(raftpb.MsgApp, 2, 1, 7, []byte("entry"))))
	f.Add(append(frameOf(3, 2, msg(raftpb.MsgHeartbeat, 2, 1, 1, nil)), frameOf(3, 2, msg(raftpb.MsgSnap, 2, 1, 9, []byte("snap")))...))
	f.Add(binary.BigEndian.AppendUint32(nil, 1<<30))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := frameReader{r: bytes.NewReader(b), maxFrame: 32 << 20}
		for {
			_, _, payload, err := fr.next()
			if err != nil {
				require.LessOrEqual(t, cap(fr.buf), max(2*len(b), 4096), "buffer beyond what was sent")
				return
			}
			m := new(raftpb.Message)
			_ = proto.Unmarshal(payload, m) // the reader's caller decodes; it must not panic either
		}
	})
}

// FuzzSplicedFrame: whatever its entries' sizes and fields, an append
// encoded with its large entries spliced reads back as the same message
// from a frame of the length the whole message would take.
func FuzzSplicedFrame(f *testing.F) {
	f.Add(uint64(7), []byte{200, 0, 1, 255}, []byte("ctx"))
	f.Add(uint64(0), []byte{64, 64, 64}, []byte(nil))
	f.Add(uint64(1<<40), []byte{0, 128, 2}, []byte("x"))
	f.Fuzz(func(t *testing.T, term uint64, sizes, ctx []byte) {
		if len(sizes) > 16 {
			sizes = sizes[:16]
		}
		m := msg(raftpb.MsgApp, 1, 2, term, nil)
		m.Context = ctx
		for i, s := range sizes {
			n := int(s) * (spliceMin / 64) // 0 .. 4 × spliceMin, across the threshold
			if s%3 == 0 {
				n = spliceMin - 1 + int(s%2)
			}
			m.Entries = append(m.Entries, &raftpb.Entry{Term: proto.Uint64(term), Index: proto.Uint64(uint64(i)),
				Data: bytes.Repeat([]byte{s}, n)})
		}
		if !splices(m) {
			return
		}
		bp, sp, err := encodeSpliced(5, 1, m)
		require.NoError(t, err)
		sealSpliced(*bp, sp)
		var wire bytes.Buffer
		require.NoError(t, writeFrame(&wire, *bp, sp))
		require.Equal(t, frameOverheadLen+proto.Size(m), wire.Len())
		fr := frameReader{r: &wire, maxFrame: 64 << 20}
		_, _, payload, err := fr.next()
		require.NoError(t, err)
		got := new(raftpb.Message)
		require.NoError(t, proto.Unmarshal(payload, got))
		require.True(t, proto.Equal(m, got))
	})
}
