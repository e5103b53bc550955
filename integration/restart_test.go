package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartSwitchProfile: data survives a graceful restart of the whole
// cluster, and the stored bytes serve either profile. kgo writes v2 batches
// with a header on the modern profile; the cluster restarts on kafka-0.10,
// where kgo reads them down-converted (no headers) and appends more through
// the MessageSet path; the cluster restarts on modern again and everything
// reads back exactly once, in order, with headers on exactly the records
// that were written with one.
func TestRestartSwitchProfile(t *testing.T) {
	const stream = "s1"
	c := StartCluster(t, Options{Profile: "modern"})
	n1, n2 := scale(500), scale(500)
	first, second := values(n1, "modern-"), values(n2, "legacy-")

	produce := func(vals []string, header bool) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.DefaultProduceTopic(stream),
			kgo.RequiredAcks(kgo.AllISRAcks()))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var recs []*kgo.Record
		for _, v := range vals {
			r := &kgo.Record{Value: []byte(v)}
			if header {
				r.Headers = []kgo.RecordHeader{{Key: "v", Value: []byte(v)}}
			}
			recs = append(recs, r)
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
	consume := func(n int) []*kgo.Record {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(0)}}),
			kgo.FetchMaxWait(200*time.Millisecond))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out []*kgo.Record
		for len(out) < n {
			fs := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "consumed %d of %d", len(out), n)
			fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
			fs.EachRecord(func(r *kgo.Record) {
				require.Equal(t, int64(len(out)), r.Offset)
				out = append(out, r)
			})
		}
		return out
	}

	produce(first, true)
	c.RestartAll("kafka-0.10")
	got := consume(n1)
	for i, r := range got {
		require.Equal(t, first[i], string(r.Value))
		require.Empty(t, r.Headers, "MessageSet v1 has no headers")
	}
	produce(second, false)
	requireEndOffset(t, c, stream, int64(n1+n2))

	c.RestartAll("modern")
	got = consume(n1 + n2)
	want := append(append([]string{}, first...), second...)
	for i, r := range got {
		require.Equal(t, want[i], string(r.Value), "offset %d", i)
		if i < n1 {
			require.Len(t, r.Headers, 1, "offset %d", i)
			require.Equal(t, want[i], string(r.Headers[0].Value))
		} else {
			require.Empty(t, r.Headers, "offset %d", i)
		}
	}
	requireEndOffset(t, c, stream, int64(n1+n2))
}
