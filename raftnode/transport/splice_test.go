package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// appendOf is a MsgApp with entries of the given data sizes (and the
// fields around them set, so a field left out or doubled shows).
func appendOf(sizes ...int) *raftpb.Message {
	m := msg(raftpb.MsgApp, 1, 2, 40, nil)
	m.Commit, m.LogTerm, m.Context = proto.Uint64(39), proto.Uint64(6), []byte("ctx")
	for i, n := range sizes {
		data := bytes.Repeat([]byte{byte('a' + i)}, n)
		m.Entries = append(m.Entries, &raftpb.Entry{Term: proto.Uint64(7), Index: proto.Uint64(uint64(41 + i)),
			Type: raftpb.EntryNormal.Enum(), Data: data})
	}
	return m
}

func TestSplicedFrameIsTheMessage(t *testing.T) {
	m := appendOf(100, spliceMin, 0, 1<<20, spliceMin-1)
	require.True(t, splices(m))
	bp, sp, err := encodeSpliced(9, 1, m)
	require.NoError(t, err)
	require.Len(t, sp, 2)
	require.Less(t, len(*bp), 2*spliceMin, "the large entries' data is not copied into the frame")
	f := frame{buf: bp, splices: sp}
	require.Equal(t, frameOverheadLen+proto.Size(m), f.len(), "the same length as the message marshalled whole")
	require.GreaterOrEqual(t, f.cost(), int64(f.len()))

	for _, unchecked := range []bool{false, true} {
		if !unchecked {
			sealSpliced(*bp, sp)
		}
		var wire bytes.Buffer
		require.NoError(t, writeFrame(&wire, *bp, sp))
		require.Equal(t, f.len(), wire.Len())
		fr := frameReader{r: &wire, maxFrame: 4 << 20, unchecked: unchecked}
		group, from, payload, err := fr.next()
		require.NoError(t, err, "unchecked %v", unchecked)
		require.Equal(t, uint64(9), group)
		require.Equal(t, uint64(1), from)
		got := new(raftpb.Message)
		require.NoError(t, proto.Unmarshal(payload, got))
		require.True(t, proto.Equal(m, got), "unchecked %v", unchecked)
	}

	// The CRC covers the spliced bytes: a flipped bit in the data is caught.
	sealSpliced(*bp, sp)
	var wire bytes.Buffer
	require.NoError(t, writeFrame(&wire, *bp, sp))
	b := wire.Bytes()
	b[len(b)-2*spliceMin] ^= 1
	fr := frameReader{r: bytes.NewReader(b), maxFrame: 4 << 20}
	_, _, _, err = fr.next()
	require.ErrorContains(t, err, "crc mismatch")
}

func TestSmallEntriesAreNotSpliced(t *testing.T) {
	require.False(t, splices(appendOf(spliceMin-1, 10)))
	require.False(t, splices(msg(raftpb.MsgHeartbeat, 1, 2, 0, nil)))
	require.False(t, splices(msg(raftpb.MsgSnap, 1, 2, 0, make([]byte, 1<<20))), "a snapshot has no entries")
}

func TestSplicedAppendsOverTLS(t *testing.T) {
	checkGoroutines(t)
	nodes := secureCluster(t, newTestPKI(t, 1, 2), 2)
	var sent []*raftpb.Message
	for i := range 20 {
		m := appendOf(spliceMin*(i%4), 10, 256<<10)
		m.Index = proto.Uint64(uint64(i))
		sent = append(sent, m)
		nodes[0].Send(1, m)
	}
	require.Eventually(t, func() bool { return nodes[1].recv.count() == len(sent) }, waitFor, 5*time.Millisecond)
	for i, r := range nodes[1].recv.from(1) {
		require.True(t, proto.Equal(sent[i], r.m), "message %d", i)
	}
}

// BenchmarkEncodeAppend encodes a follower's frame of one 1 MiB entry (a
// produce request of franz-go's default size), whole and spliced: the
// bytes copied into the frame per follower are what splicing saves.
func BenchmarkEncodeAppend(b *testing.B) {
	m := appendOf(1 << 20)
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			bp, err := encodeFrame(1, 1, m, proto.Size(m))
			require.NoError(b, err)
			b.ReportMetric(float64(len(*bp)), "bytes-copied/op")
			putBuf(bp)
		}
	})
	b.Run("spliced", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			bp, _, err := encodeSpliced(1, 1, m)
			require.NoError(b, err)
			b.ReportMetric(float64(len(*bp)), "bytes-copied/op")
			putBuf(bp)
		}
	})
}

// TestLargeFramesKeepTheReadBuffer: a stream of appends of 1 MiB entries
// (frames just over 1 MiB) reads each into the buffer the first one grew;
// the buffer was dropped after every frame over 1 MiB and grown again
// from 4 KiB, about 3 MiB allocated per frame.
func TestLargeFramesKeepTheReadBuffer(t *testing.T) {
	m := msg(raftpb.MsgApp, 1, 2, 1, make([]byte, 1<<20))
	bp, err := encodeFrame(1, 1, m, proto.Size(m))
	require.NoError(t, err)
	sealFrame(*bp)
	require.Greater(t, len(*bp), 1<<20)
	wire := bytes.Repeat(*bp, 12)
	fr := frameReader{r: bytes.NewReader(wire), maxFrame: 4 << 20}
	_, _, _, err = fr.next() // grows the buffer
	require.NoError(t, err)
	var n int
	allocs := testing.AllocsPerRun(10, func() {
		_, _, payload, err := fr.next()
		if err == nil {
			n += len(payload)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, 11*(len(*bp)-frameHeaderLen-framePrefixLen), n, "every frame read whole")
}
