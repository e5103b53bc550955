package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// An append carrying a 1 MB produce request (franz-go's default batch
// size) is encoded into a pooled buffer: once one was given back, the next
// frame of that size allocates nothing (it used to allocate and zero a
// fresh 1 MiB buffer per frame and follower). The buffer's capacity stays
// under twice the frame (the queues charge capacity).
func TestLargeFramesArePooled(t *testing.T) {
	m := msg(raftpb.MsgApp, 1, 2, 42, make([]byte, 1000012))
	size := proto.Size(m)
	bp, err := encodeFrame(1, 1, m, size)
	require.NoError(t, err)
	require.Less(t, cap(*bp), 2*len(*bp))
	putBuf(bp)
	allocs := testing.AllocsPerRun(20, func() {
		bp, err := encodeFrame(1, 1, m, size)
		if err != nil {
			t.Fatal(err)
		}
		putBuf(bp)
	})
	// sync.Pool may drop an item (always under -race, a quarter of the
	// Puts): at most one allocation on average, against two per frame
	// (the buffer and its pointer) unpooled.
	require.LessOrEqual(t, allocs, 1.0)
}
