package kafka

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSpliceMatchesKmsg: a spliced fetch response, its pieces joined, is
// byte for byte what kmsg encodes with the records in place, for every
// spliceable version and random shapes (topics, partitions, errors,
// aborted transactions, empty and multi-piece records).
func TestSpliceMatchesKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		v := int16(4 + round%8)
		full, spliced := kmsg.NewPtrFetchResponse(), kmsg.NewPtrFetchResponse()
		full.Version, spliced.Version = v, v
		full.ThrottleMillis, full.ErrorCode, full.SessionID = rng.Int32(), int16(rng.IntN(3)), rng.Int32()
		spliced.ThrottleMillis, spliced.ErrorCode, spliced.SessionID = full.ThrottleMillis, full.ErrorCode, full.SessionID
		var recs [][][]byte
		for ti := range rng.IntN(4) {
			ft, st := kmsg.NewFetchResponseTopic(), kmsg.NewFetchResponseTopic()
			ft.Topic = string(rune('a'+ti)) + "-topic"[:rng.IntN(7)]
			st.Topic = ft.Topic
			for pi := range rng.IntN(4) {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.ErrorCode = int32(pi), int16(rng.IntN(2))
				p.HighWatermark, p.LastStableOffset, p.LogStartOffset = rng.Int64(), -1, rng.Int64N(1000)
				p.PreferredReadReplica = -1
				if rng.IntN(2) == 0 {
					p.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
				}
				var segs [][]byte
				var data []byte
				for range rng.IntN(4) {
					seg := make([]byte, rng.IntN(3000))
					for k := range seg {
						seg[k] = byte(rng.Uint32())
					}
					segs = append(segs, seg)
					data = append(data, seg...)
				}
				sp := p
				sp.RecordBatches = []byte{}
				p.RecordBatches = append([]byte{}, data...)
				ft.Partitions = append(ft.Partitions, p)
				st.Partitions = append(st.Partitions, sp)
				recs = append(recs, segs)
			}
			full.Topics = append(full.Topics, ft)
			spliced.Topics = append(spliced.Topics, st)
		}
		want := appendResponse(nil, kmsg.Fetch.Int16(), int32(round), full)
		pieces, ok := spliceFetch(kmsg.Fetch.Int16(), int32(round), spliced, recs)
		require.True(t, ok, "round %d v%d", round, v)
		require.Equal(t, want, joinPieces(nil, pieces), "round %d v%d", round, v)
	}
}

// TestSpliceRefusesOtherVersions: down-converted (v0–v3) and flexible
// (v12+) responses are not spliced.
func TestSpliceRefusesOtherVersions(t *testing.T) {
	for _, v := range []int16{0, 3, 12, 13} {
		r := kmsg.NewPtrFetchResponse()
		r.Version = v
		_, ok := spliceFetch(kmsg.Fetch.Int16(), 1, r, nil)
		require.False(t, ok, "v%d", v)
	}
}
