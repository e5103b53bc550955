package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// epochHook counts the OffsetForLeaderEpoch requests a client writes.
type epochHook struct{ n atomic.Int32 }

func (h *epochHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == kmsg.OffsetForLeaderEpoch.Int16() {
		h.n.Add(1)
	}
}

// franz-go detects a truncated log through OffsetForLeaderEpoch (KIP-320):
// it consumed offsets 0-9 in epoch 0; the log is then cut back to 6 and a
// new leader epoch writes from there (what an unclean leader change does
// to a Kafka log). On seeing the new epoch in Metadata the client asks
// where epoch 0 ends (6, below its position 10), reports the data loss and
// resumes at 6, so it reads the new epoch's records instead of skipping
// them. Without OffsetForLeaderEpoch (or with epoch -1 everywhere) it
// would wait at offset 10 and never see offsets 6-9.
func TestFranzGoDetectsTruncation(t *testing.T) {
	addr, be := startServer(t, "")
	st := be.StreamByName(topic)
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite())
	require.NoError(t, err)
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produce := func(prefix string, n int) {
		for i := range n {
			require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s%d", prefix, i)}).FirstErr())
		}
	}
	produce("old", 10)

	hook := &epochHook{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(100*time.Millisecond),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.WithHooks(hook))
	require.NoError(t, err)
	defer cons.Close()
	var got []string
	var lost []error
	poll := func(until func() bool) {
		for !until() {
			fs := cons.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			fs.EachError(func(_ string, _ int32, err error) {
				var dl *kgo.ErrDataLoss
				require.True(t, errors.As(err, &dl), "only data loss is expected: %v", err)
				lost = append(lost, err)
			})
			fs.EachRecord(func(r *kgo.Record) {
				got = append(got, fmt.Sprintf("%d:%s@%d", r.Offset, r.Value, r.LeaderEpoch))
			})
		}
	}
	poll(func() bool { return len(got) == 10 })
	require.Equal(t, "9:old9@0", got[9])

	st.Truncate(6)
	st.SetEpoch(1)
	produce("new", 3)
	poll(func() bool { return len(got) == 13 })
	require.Equal(t, []string{"6:new0@1", "7:new1@1", "8:new2@1"}, got[10:])
	require.Len(t, lost, 1, "the loss of offsets 6-9 is reported")
	var dl *kgo.ErrDataLoss
	require.ErrorAs(t, lost[0], &dl)
	require.Equal(t, int64(10), dl.ConsumedTo)
	require.Equal(t, int64(6), dl.ResetTo)
	require.Positive(t, hook.n.Load(), "the client asked OffsetForLeaderEpoch")
}
