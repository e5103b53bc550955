package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCatchUpReadsWithClients: with a tail cache of 64 KiB and 1 MiB
// segments, reading a stream from its start goes through closed segments'
// preads into pooled buffers, spliced uncopied into Fetch v4+ responses
// (kgo: v11, sarama 2.1: v10) or down-converted (sarama 0.10: v3); every
// client reads every value once, in order, also from a middle offset.
func TestCatchUpReadsWithClients(t *testing.T) {
	const stream = "s1"
	c := StartCluster(t, Options{SegmentBytes: 1 << 20, TailCacheBytes: 64 << 10})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pad := strings.Repeat("p", 1000)
	want := values(scale(4000), "catchup-"+pad+"-")
	errs := make(chan error, len(want))
	for _, v := range want {
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) { errs <- err })
	}
	require.NoError(t, cl.Flush(ctx))
	for range want {
		require.NoError(t, <-errs)
	}
	require.Equal(t, want, kgoConsume(t, c.KafkaAddrs(), stream, 0, len(want)))
	mid := len(want) / 3
	require.Equal(t, want[mid:], kgoConsume(t, c.KafkaAddrs(), stream, int64(mid), len(want)-mid))
	for _, ver := range []sarama.KafkaVersion{sarama.V2_1_0_0, sarama.V0_10_2_0} {
		require.Equal(t, want, saramaConsume(t, c.KafkaAddrs(), saramaConfig(ver), stream, len(want)), "sarama %s", ver)
	}
}
