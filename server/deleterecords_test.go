package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeleteRecords through franz-go's kadm: the start moves to the offset
// asked (not a segment boundary) on every replica, whole segments below it
// go, ListOffsets earliest and consumers see the new start at once, a fetch
// below it is out of range; an offset past the high watermark is refused.
func TestDeleteRecordsWithKadm(t *testing.T) {
	c := newTestCluster(t, 64<<10)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 20*time.Second, 20*time.Millisecond)
	produceValues(t, c.brokers(), "a", 2000) // about 500 KiB: several segments
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var os kadm.Offsets
	os.AddOffset("s", 0, 3001, -1)
	res, err := adm.DeleteRecords(ctx, os)
	require.NoError(t, err)
	r, _ := res.Lookup("s", 0)
	require.ErrorIs(t, r.Err, kerr.OffsetOutOfRange, "past the high watermark")

	os = nil
	os.AddOffset("s", 0, 1501, -1)
	res, err = adm.DeleteRecords(ctx, os)
	require.NoError(t, err)
	r, _ = res.Lookup("s", 0)
	require.NoError(t, r.Err)
	require.Equal(t, int64(1501), r.LowWatermark)

	// At once: earliest is the new start, and a consumer from the start
	// begins there.
	starts, err := adm.ListStartOffsets(ctx, "s")
	require.NoError(t, err)
	lo, _ := starts.Lookup("s", 0)
	require.NoError(t, lo.Err)
	require.Equal(t, int64(1501), lo.Offset)
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"s": {0: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	require.NoError(t, fs.Err())
	require.Equal(t, int64(1501), fs.Records()[0].Offset)

	// Below the start: out of range (no reset, so the error shows).
	below, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...), kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"s": {0: kgo.NewOffset().At(10)}}))
	require.NoError(t, err)
	defer below.Close()
	fs = below.PollFetches(ctx)
	require.ErrorIs(t, fs.Err(), kerr.OffsetOutOfRange)

	// Replicated: every replica starts there and dropped its whole
	// segments below it.
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			l := s.stream1().log
			if l.StartOffset() != 1501 || l.Segments()[0].FirstOffset > 1501 || l.Segments()[0].EndOffset <= 1501 && !l.Segments()[0].Active {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)

	// At or below the start: nothing changes, the start is answered.
	os = nil
	os.AddOffset("s", 0, 100, -1)
	res, err = adm.DeleteRecords(ctx, os)
	require.NoError(t, err)
	r, _ = res.Lookup("s", 0)
	require.NoError(t, r.Err)
	require.Equal(t, int64(1501), r.LowWatermark)
}
