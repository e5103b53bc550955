package server

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/configserver"
)

// A config server loses its data dir while three servers serve a stream
// that is produced to throughout: restarted on an empty dir it is refused;
// a removal that would lose the quorum is refused; remove + add bring it
// back (a learner catching up from a snapshot of the compacted log, then a
// voter); the three catalogs are identical; once it leads, streams are
// created through it; no acknowledged write is lost. Real TCP (mutual
// TLS, the operators' token) and real files.
func TestControlledConfigServerReplaced(t *testing.T) {
	c, svcs := newControlledClusterCS(t, nil, func(cfg *configserver.Config) { cfg.CompactAfter, cfg.LogSegmentBytes = 20, 4096 }, nil)
	var apis []string
	for _, s := range svcs {
		apis = append(apis, s.APIAddr())
	}
	cc := configserver.NewClient(apis, true, c.adminClient(true, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err := cc.CreateStream(ctx, configserver.StreamSpec{Name: "orders"})
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)

	// Produce throughout.
	// Metadata refreshed often: the stream may not be hosted yet when the
	// client first asks, and a client re-asks after an error no sooner
	// than its minimum metadata age (5 s by default): four such answers
	// under load take the 20 s allowed for the first acknowledgements
	// (what the one CI failure of this test looked like).
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs()...), kgo.DefaultProduceTopic("orders"), kgo.MetadataMinAge(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var mu sync.Mutex
	var acked []string
	var lastErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprintf("v%d", i)
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			err := cl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			pcancel()
			mu.Lock()
			if lastErr = err; err == nil {
				acked = append(acked, v)
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	if !assert.Eventually(t, func() bool { return ackedNow() > 20 }, 20*time.Second, 50*time.Millisecond) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d produced records acknowledged; the last produce error: %v", len(acked), lastErr)
	}

	leaderIdx := func() int {
		for i, s := range svcs {
			if s != nil && s.Leader() == uint64(i+1) {
				return i
			}
		}
		return -1
	}
	var lead int
	require.Eventually(t, func() bool { lead = leaderIdx(); return lead >= 0 }, 10*time.Second, 50*time.Millisecond)
	victim, other := (lead+1)%3, (lead+2)%3
	vid, oid := uint64(victim+1), uint64(other+1)
	require.NoError(t, svcs[victim].Close())
	svcs[victim] = nil
	require.NoError(t, os.RemoveAll(c.csCfgs[victim].DataDir))
	svcs[victim], err = configserver.Start(c.csCfgs[victim], testLogger(t))
	require.NoError(t, err)
	member := func(id uint64) configserver.ConfigServerStatus {
		cs, err := cc.ConfigServers(ctx)
		if err != nil {
			return configserver.ConfigServerStatus{}
		}
		for _, m := range cs.Members {
			if m.ID == id {
				return m
			}
		}
		return configserver.ConfigServerStatus{}
	}
	require.Eventually(t, func() bool { return member(vid).Health == "refused" }, 10*time.Second, 100*time.Millisecond,
		"the config server with a lost data dir is refused")

	err = cc.RemoveConfigServer(ctx, oid)
	require.ErrorIs(t, err, configserver.ErrMembership)
	require.Contains(t, err.Error(), "lose their quorum")
	require.NoError(t, cc.RemoveConfigServer(ctx, vid))
	for i := range 60 { // the log is compacted meanwhile (compact_after 20)
		_, err := cc.AlterStream(ctx, "orders", configserver.StreamChange{RetentionMs: new(int64(3_600_000 + i))})
		require.NoError(t, err)
	}
	require.NoError(t, cc.AddConfigServer(ctx, vid))
	require.Eventually(t, func() bool {
		m := member(vid)
		return m.Role == "voter" && m.Health == "up"
	}, 30*time.Second, 100*time.Millisecond, "the new config server is a voter, caught up")

	// It leads, and streams are created through it.
	require.NoError(t, cc.TransferConfigLeader(ctx, vid))
	require.Eventually(t, func() bool { return svcs[victim].Leader() == vid }, 10*time.Second, 50*time.Millisecond)
	only := configserver.NewClient([]string{apis[victim]}, true, c.adminClient(true, ""))
	require.Eventually(t, func() bool { // once the servers reported to it
		_, err := only.CreateStream(ctx, configserver.StreamSpec{Name: "through-the-new-one"})
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	require.Eventually(t, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		defer pcancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: "through-the-new-one", Value: []byte("x")}).FirstErr() == nil
	}, 20*time.Second, 200*time.Millisecond)

	// The same catalog on the three.
	require.Eventually(t, func() bool {
		var want string
		for i, s := range svcs {
			srv, sts, v, applied := s.Catalog()
			got := fmt.Sprint(srv, sts, v, applied)
			if i > 0 && got != want {
				return false
			}
			want = got
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "the three config servers have the same catalog")

	close(stop)
	wg.Wait()
	mu.Lock()
	want := append([]string(nil), acked...)
	mu.Unlock()
	got := consumeAll(t, c, len(want))
	require.Subset(t, got, want, "every acknowledged write is there")
	t.Logf("%d writes acknowledged while the config server was replaced", len(want))
}
