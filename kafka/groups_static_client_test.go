package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/kafka"
)

// Static membership (KIP-345) with franz-go: two members with instance ids
// share a one-partition topic; the owner's process restarts (its client
// closes, a new one with the same instance id starts) well inside the
// session timeout. The restarted member gets the partition back at once,
// resumes from the committed offset, and nobody rebalances: the
// generation is the same, the other member is never assigned or revoked
// anything again.
func TestGroupFranzGoStaticMemberRestart(t *testing.T) {
	addr, _, srv := startGroupServer(t, kafka.ProfileModern)
	want := values(40, "v")
	produceValues(t, addr, want[:20])

	type member struct {
		cl                *kgo.Client
		assigned, revoked atomic.Int32
		owns              atomic.Bool
	}
	start := func(instance string) *member {
		m := &member{}
		opts := append(kgoGroupOpts(addr, kafka.ProfileModern, kgo.RangeBalancer()),
			kgo.InstanceID(instance), kgo.SessionTimeout(6*time.Second), kgo.RebalanceTimeout(6*time.Second),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				m.assigned.Add(1)
				if len(a[topic]) > 0 {
					m.owns.Store(true)
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
				if len(r[topic]) > 0 {
					m.revoked.Add(1)
					m.owns.Store(false)
				}
			}))
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		m.cl = cl
		return m
	}
	a, b := start("ia"), start("ib")
	defer b.cl.Close()
	generation := func() int32 {
		st := srv.Groups().Status(srv.Now(), nil)
		if len(st.Groups) != 1 {
			return -1
		}
		return st.Groups[0].Generation
	}
	// Both joined, and the group settled on one owner of partition 0 (the
	// first member may have owned it for a generation before the second
	// joined: owns follows assignments and revocations).
	require.Eventually(t, func() bool {
		_, ga := a.cl.GroupMetadata()
		_, gb := b.cl.GroupMetadata()
		return ga > 0 && ga == gb && ga == generation() && a.owns.Load() != b.owns.Load()
	}, 20*time.Second, 20*time.Millisecond)
	owner, other, instance := a, b, "ia"
	if b.owns.Load() {
		owner, other, instance = b, a, "ib"
	}
	_, got := pollUntil(t, owner.cl, 20, true)
	require.Equal(t, want[:20], got)
	gen := generation()
	otherAssigned, otherRevoked := other.assigned.Load(), other.revoked.Load()

	owner.cl.Close() // a static member does not leave the group on close
	restarted := start(instance)
	defer restarted.cl.Close()
	produceValues(t, addr, want[20:])
	offs, got := pollUntil(t, restarted.cl, 20, true)
	require.Equal(t, int64(20), offs[0], "resumes at the committed offset")
	require.Equal(t, want[20:], got)
	require.True(t, restarted.owns.Load())

	_, g := restarted.cl.GroupMetadata()
	require.Equal(t, gen, g, "no rebalance: the same generation")
	require.Equal(t, gen, generation())
	_, g = other.cl.GroupMetadata()
	require.Equal(t, gen, g)
	require.Equal(t, otherAssigned, other.assigned.Load(), "the other member was not rebalanced")
	require.Equal(t, otherRevoked, other.revoked.Load())
}
