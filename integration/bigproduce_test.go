package integration

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// TestOversizedProduceIsRefused: one partition's record set in one Produce
// becomes one Raft entry, bounded by max_entry_bytes (8 MiB by default),
// below the peer transport's frame limit. 40 valid ~1 MB batches in one
// partition once wedged the stream for good (an entry no follower could
// receive, retried forever); now the produce gets MESSAGE_TOO_LARGE, and the
// stream goes on: a record set just under the limit is acknowledged and
// replicated to every replica, and ordinary produces follow.
func TestOversizedProduceIsRefused(t *testing.T) {
	c := StartCluster(t, Options{})
	leader := c.WaitLeader("s1", 20*time.Second)
	// One connection per produce, the request encoded by kmsg: the server
	// closes a connection after a failed produce.
	send := func(batches, size int) *kmsg.ProduceResponseTopicPartition {
		var recs []byte
		for i := range batches {
			recs = append(recs, v2Batch(strings.Repeat(string(rune('a'+i%26)), size))...)
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(8)
		req.Acks, req.TimeoutMillis = -1, 20000
		tp := kmsg.NewProduceRequestTopic()
		tp.Topic = "s1"
		p := kmsg.NewProduceRequestTopicPartition()
		p.Records = recs
		tp.Partitions = append(tp.Partitions, p)
		req.Topics = append(req.Topics, tp)
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(8)
		roundTrip(t, c.Node(leader).Kafka, req, resp)
		return &resp.Topics[0].Partitions[0]
	}

	big := send(40, 1000<<10)
	require.Equal(t, int16(10), big.ErrorCode, "40 MB in one partition: MESSAGE_TOO_LARGE")
	require.Contains(t, *big.ErrorMessage, "max_entry_bytes")

	// Just under the limit: acknowledged, and every replica gets it.
	ok := send(7, 1000<<10)
	require.Equal(t, int16(0), ok.ErrorCode)
	require.Equal(t, int64(0), ok.BaseOffset)
	requireEndOffset(t, c, "s1", 7)

	// The stream goes on.
	produceTo(t, c.KafkaAddrs(), values(10, "after-"))
	requireEndOffset(t, c, "s1", 17)
}

// v2Batch is one uncompressed RecordBatch v2 holding value.
func v2Batch(value string) []byte {
	r := kmsg.Record{Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	ts := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// roundTrip sends one request on a new connection and decodes the answer.
func roundTrip(t *testing.T, addr string, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	require.NoError(t, proccluster.RoundTrip(addr, req, resp, 30*time.Second))
}
