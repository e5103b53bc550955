package kafka

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRoomBeforeRecords: the byte before each partition's records in a
// produce request is theirs to overwrite (the end of their length, parsed
// already), in the flexible and the older encodings, and overwriting it
// changes no partition's records.
func TestRoomBeforeRecords(t *testing.T) {
	for _, v := range []int16{3, 8, 9, 11} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks = v, -1
		var want [][]byte
		for i, topic := range []string{"a", "b", "c"} {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			p := kmsg.NewProduceRequestTopicPartition()
			p.Records = bytes.Repeat([]byte{byte('x' + i)}, 100*(i+1))
			want = append(want, p.Records)
			rt.Partitions = append(rt.Partitions, p)
			req.Topics = append(req.Topics, rt)
		}
		frame := req.AppendTo(nil) // a body is enough: the records are in its middle
		parsed := kmsg.NewPtrProduceRequest()
		parsed.Version = v
		require.NoError(t, parsed.ReadFrom(frame))

		var rooms [][]byte
		for _, rt := range parsed.Topics {
			recs := rt.Partitions[0].Records
			room := roomBefore(frame, recs)
			require.NotNil(t, room, "v%d %s", v, rt.Topic)
			require.Equal(t, len(recs)+1, len(room))
			require.Same(t, &recs[0], &room[1], "the same memory, not a copy")
			rooms = append(rooms, room)
		}
		for _, room := range rooms {
			room[0] = 0xEE
		}
		for i, rt := range parsed.Topics {
			require.Equal(t, want[i], rt.Partitions[0].Records, "v%d %s", v, rt.Topic)
		}
	}
}

func TestNoRoomOutsideTheFrame(t *testing.T) {
	frame := []byte("0123456789")
	require.Nil(t, roomBefore(frame, []byte("3456")), "not the frame's memory")
	require.Nil(t, roomBefore(frame, frame[:4]), "nothing before it")
	require.Nil(t, roomBefore(frame, frame[4:4]), "empty")
	other := []byte("0123456789")
	require.Nil(t, roomBefore(frame, other[3:5]), "another buffer of the same size")
	room := roomBefore(frame, frame[3:5])
	require.Equal(t, []byte("234"), room)
	require.Equal(t, 3, cap(room), "an append to it cannot reach the frame's next bytes")
}
