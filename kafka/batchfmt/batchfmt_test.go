package batchfmt_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// The layout agrees with franz-go's encoding of a RecordBatch.
func TestLayoutMatchesKmsg(t *testing.T) {
	rb := kmsg.RecordBatch{
		FirstOffset: 7, PartitionLeaderEpoch: 3, Magic: 2, CRC: 0x01020304,
		Attributes: 0x0a0b, LastOffsetDelta: 4, FirstTimestamp: 100, MaxTimestamp: 200,
		ProducerID: 9, ProducerEpoch: 5, FirstSequence: 6, NumRecords: 5, Records: []byte("records"),
	}
	rb.Length = int32(batchfmt.MinBatchLength + len(rb.Records))
	b := rb.AppendTo(nil)
	be := binary.BigEndian

	require.Len(t, b, batchfmt.HeaderSize+len(rb.Records))
	require.Equal(t, int64(7), int64(be.Uint64(b[batchfmt.OffBaseOffset:])))
	require.Equal(t, rb.Length, batchfmt.BatchLength(b))
	require.Equal(t, len(b), int(batchfmt.BatchLength(b))+batchfmt.LengthOverhead)
	require.Equal(t, int32(3), int32(be.Uint32(b[batchfmt.OffLeaderEpoch:])))
	require.Equal(t, byte(batchfmt.Magic), b[batchfmt.OffMagic])
	require.Equal(t, uint32(0x01020304), be.Uint32(b[batchfmt.OffCRC:]))
	require.Equal(t, uint16(0x0a0b), be.Uint16(b[batchfmt.OffAttributes:]))
	require.Equal(t, int32(4), batchfmt.LastOffsetDelta(b))
	require.Equal(t, int64(100), int64(be.Uint64(b[batchfmt.OffFirstTimestamp:])))
	require.Equal(t, int64(200), batchfmt.MaxTimestamp(b))
	require.Equal(t, int64(9), int64(be.Uint64(b[batchfmt.OffProducerID:])))
	require.Equal(t, uint16(5), be.Uint16(b[batchfmt.OffProducerEpoch:]))
	require.Equal(t, uint32(6), be.Uint32(b[batchfmt.OffBaseSequence:]))
	require.Equal(t, uint32(5), be.Uint32(b[batchfmt.OffRecordCount:]))

	batchfmt.SetBaseOffset(b, 1000)
	require.Equal(t, int64(1000), int64(be.Uint64(b[batchfmt.OffBaseOffset:])))
	batchfmt.SetLeaderEpoch(b, 42)
	require.Equal(t, int32(42), batchfmt.LeaderEpoch(b))
	require.Equal(t, int32(42), int32(be.Uint32(b[batchfmt.OffLeaderEpoch:])))
	require.Equal(t, int32(1<<31-1), batchfmt.EpochOfTerm(1<<40))
}
