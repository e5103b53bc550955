package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/configserver"
)

// produceThroughout produces to topic until the returned stop is called,
// which returns the acknowledged values.
func produceThroughout(t *testing.T, c *testCluster, topic string) func() []string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	var mu sync.Mutex
	var acked []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			v := fmt.Sprintf("p%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr() == nil {
				mu.Lock()
				acked = append(acked, v)
				mu.Unlock()
			}
			cancel()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() []string {
		close(done)
		wg.Wait()
		cl.Close()
		mu.Lock()
		defer mu.Unlock()
		return acked
	}
}

// One replica of a stream moves back and forth between two servers of a
// four-server cluster, four times, while it is produced to: each move
// back waits until the former replica's copy is gone and every replica's
// membership is without it (the config servers then release it), and
// succeeds; no acknowledged write is lost. Before, a stream never went
// back to a server it left, and the second move was refused for good.
func TestControlledMoveBackAndForth(t *testing.T) {
	c, cc, st := movesCluster(t, 30)
	var b uint64
	for id := uint64(1); id <= 4; id++ {
		if !slices.Contains(st.Replicas, id) {
			b = id
		}
	}
	a := st.Replicas[1]
	stop := produceThroughout(t, c, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	from, to := a, b
	for i := range 4 {
		var why string
		require.Eventually(t, func() bool {
			_, err := cc.StartMove(ctx, configserver.MoveRequest{Stream: "orders", From: from, To: to})
			if fmt.Sprint(err) != why {
				why = fmt.Sprint(err)
				t.Logf("move %d (%d to %d): %s", i, from, to, why)
			}
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "move %d (%d to %d)", i, from, to)
		waitMove(t, cc, configserver.MoveDone)
		after, err := cc.Stream(ctx, "orders")
		require.NoError(t, err)
		require.Contains(t, after.Replicas, to)
		require.NotContains(t, after.Replicas, from)
		t.Logf("move %d: %d -> %d done; replicas %v, former %v", i, from, to, after.Replicas, after.Former)
		from, to = to, from
	}
	acked := stop()
	got := consumeAll(t, c, 30+len(acked))
	require.Subset(t, got, acked, "every acknowledged write is there")
	t.Logf("%d writes acknowledged during the moves", len(acked))
}
