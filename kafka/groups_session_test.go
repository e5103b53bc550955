package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

// groupHarness returns a harness whose backend has the offsets stream, and
// a second session sharing its coordinator.
func groupHarness(t *testing.T, profile string) (*harness, *kafka.Groups) {
	h := newHarness(t, kafka.Config{Profile: profile})
	h.be.AddStream(kafka.DefaultOffsetsTopic)
	g := kafka.NewGroups(kafka.GroupsConfig{}, h.be)
	s, err := kafka.NewSessionWithGroups(kafka.Config{Profile: profile}, h.be, g, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	return h, g
}

func peer(t *testing.T, h *harness, g *kafka.Groups) *harness {
	p := &harness{t: t, be: h.be, sent: map[int32]kmsg.Request{}}
	s, err := kafka.NewSessionWithGroups(kafka.Config{}, h.be, g, func(c kafka.Completion) { p.compl = append(p.compl, c) })
	require.NoError(t, err)
	p.s = s
	return p
}

func one(t *testing.T, h *harness) kmsg.Response {
	t.Helper()
	got := h.take()
	require.Len(t, got, 1)
	return got[0].resp
}

func commitReq(v int16, group string, gen int32, member, topic string, off int64, meta string) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version, r.Group, r.Generation, r.MemberID = v, group, gen, member
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Offset, p.Metadata, p.Timestamp, p.LeaderEpoch = off, &meta, -1, 5
	rt.Partitions = append(rt.Partitions, p)
	r.Topics = append(r.Topics, rt)
	return r
}

func fetchOffsetsReq(v int16, group, topic string) *kmsg.OffsetFetchRequest {
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version, r.Group = v, group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	r.Topics = append(r.Topics, rt)
	return r
}

func commitCode(t *testing.T, h *harness, req *kmsg.OffsetCommitRequest) int16 {
	t.Helper()
	h.send(req)
	return one(t, h).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

func TestGroupOffsetsSurviveCoordinatorChange(t *testing.T) {
	h, _ := groupHarness(t, kafka.ProfileModern)
	// A simple consumer commits (generation -1, no member).
	require.Equal(t, int16(0), commitCode(t, h, commitReq(6, "simple", -1, "", "a", 7, "m")))
	require.Equal(t, int16(0), commitCode(t, h, commitReq(2, "simple", -1, "", "b", 3, "")))
	require.Equal(t, int16(0), commitCode(t, h, commitReq(0, "simple", 0, "", "a", 9, "nine")))

	// A new coordinator (a new leader, or a restart) replays the offsets
	// stream.
	g2 := kafka.NewGroups(kafka.GroupsConfig{}, h.be)
	p := peer(t, h, g2)
	p.send(fetchOffsetsReq(5, "simple", "a"))
	fp := one(t, p).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]
	require.Equal(t, int64(9), fp.Offset)
	require.Equal(t, "nine", *fp.Metadata)
	require.Equal(t, int32(-1), fp.LeaderEpoch) // v0 commit carries none
	// v2+ null topics: everything of the group.
	all := kmsg.NewPtrOffsetFetchRequest()
	all.Version, all.Group = 3, "simple"
	p.send(all)
	ar := one(t, p).(*kmsg.OffsetFetchResponse)
	require.Len(t, ar.Topics, 2)
	require.Equal(t, "b", ar.Topics[1].Topic)
	require.Equal(t, int64(3), ar.Topics[1].Partitions[0].Offset)
	// Unknown partition: -1, no error.
	p.send(fetchOffsetsReq(1, "other", "a"))
	fp = one(t, p).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]
	require.Equal(t, int64(-1), fp.Offset)
	require.Equal(t, int16(0), fp.ErrorCode)

	// Leadership of the offsets stream moves to broker 2.
	h.be.SetBrokers(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092}, kafka.Broker{NodeID: 2, Host: "127.0.0.2", Port: 9093})
	h.be.StreamByName(kafka.DefaultOffsetsTopic).SetLeader(2)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKey = 1, "simple"
	h.send(fc)
	fr := one(t, h).(*kmsg.FindCoordinatorResponse)
	require.Equal(t, int16(0), fr.ErrorCode)
	require.Equal(t, int32(2), fr.NodeID)
	require.Equal(t, "127.0.0.2", fr.Host)
	require.Equal(t, int16(16), commitCode(t, h, commitReq(2, "simple", -1, "", "a", 10, "")))
	h.send(fetchOffsetsReq(2, "simple", "a"))
	require.Equal(t, int16(16), one(t, h).(*kmsg.OffsetFetchResponse).ErrorCode)
	h.send(fetchOffsetsReq(1, "simple", "a"))
	require.Equal(t, int16(16), one(t, h).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].ErrorCode)
	// No leader: COORDINATOR_NOT_AVAILABLE.
	h.be.StreamByName(kafka.DefaultOffsetsTopic).SetLeader(-1)
	h.send(fc)
	require.Equal(t, int16(15), one(t, h).(*kmsg.FindCoordinatorResponse).ErrorCode)
}

func TestGroupCommitErrors(t *testing.T) {
	h, _ := groupHarness(t, kafka.ProfileKafka0102)
	require.Equal(t, int16(3), commitCode(t, h, commitReq(2, "g", -1, "", "nope", 1, "")))
	big := make([]byte, 5000)
	require.Equal(t, int16(12), commitCode(t, h, commitReq(2, "g", -1, "", "a", 1, string(big))))
	require.Equal(t, int16(22), commitCode(t, h, commitReq(2, "nogroup", 4, "m", "a", 1, "")))
	h.be.FailProduces(kafka.ErrNotLeader)
	require.Equal(t, int16(16), commitCode(t, h, commitReq(2, "g", -1, "", "a", 1, "")))
	h.be.FailProduces(kafka.ErrBackpressure)
	require.Equal(t, int16(15), commitCode(t, h, commitReq(2, "g", -1, "", "a", 1, "")))
	h.be.FailProduces(nil)
	// Clients cannot write the internal stream.
	h.send(produceReq(2, -1, kafka.DefaultOffsetsTopic, legacySet(t)))
	require.Equal(t, int16(17), one(t, h).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
}

func legacySet(t *testing.T) []byte {
	// One magic-1 message, value "x".
	msg := []byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 'x'}
	crc := crc32IEEE(msg[4:])
	msg[0], msg[1], msg[2], msg[3] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
	var b []byte
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, 0, 0, 0, byte(len(msg)))
	return append(b, msg...)
}

func joinReq(v int16, member string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version, r.Group, r.MemberID = v, "g", member
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = 10000, 20000, "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{1}
	r.Protocols = append(r.Protocols, p)
	return r
}

// The full dance over two connections: MEMBER_ID_REQUIRED, a JoinGroup
// parked until the other member rejoins, a SyncGroup parked until the
// leader's, heartbeats, DescribeGroups, ListGroups, LeaveGroup.
func TestGroupJoinSyncParking(t *testing.T) {
	a, g := groupHarness(t, kafka.ProfileModern)
	b := peer(t, a, g)
	join := func(h *harness, v int16, member string) *kmsg.JoinGroupResponse {
		h.send(joinReq(v, member))
		return one(t, h).(*kmsg.JoinGroupResponse)
	}
	r := join(a, 4, "")
	require.Equal(t, int16(79), r.ErrorCode)
	idA := r.MemberID
	r = join(a, 4, idA)
	require.Equal(t, int16(0), r.ErrorCode)
	require.Equal(t, idA, r.LeaderID)
	gen := r.Generation
	sr := kmsg.NewPtrSyncGroupRequest()
	sr.Version, sr.Group, sr.Generation, sr.MemberID = 2, "g", gen, idA
	a.send(sr)
	require.Equal(t, int16(0), one(t, a).(*kmsg.SyncGroupResponse).ErrorCode)

	// b joins (v1, no MEMBER_ID_REQUIRED): parked until a rejoins.
	b.send(joinReq(1, ""))
	require.Empty(t, b.take())
	require.Len(t, b.out.Wait, 1)
	require.NotZero(t, b.out.Deadline)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.Generation, hb.MemberID = 2, "g", gen, idA
	a.send(hb)
	require.Equal(t, int16(27), one(t, a).(*kmsg.HeartbeatResponse).ErrorCode)
	r = join(a, 4, idA)
	require.Equal(t, gen+1, r.Generation)
	require.Len(t, r.Members, 2)
	select {
	case <-b.out.Wait[0]:
	default:
		t.Fatal("b's parked join was not woken")
	}
	b.s.Poll(b.now)
	br := one(t, b).(*kmsg.JoinGroupResponse)
	require.Equal(t, int16(0), br.ErrorCode)
	require.Equal(t, idA, br.LeaderID)
	require.Empty(t, br.Members)
	idB := br.MemberID

	// b syncs first and parks; a's sync delivers both assignments.
	sb := kmsg.NewPtrSyncGroupRequest()
	sb.Version, sb.Group, sb.Generation, sb.MemberID = 0, "g", gen+1, idB
	b.send(sb)
	require.Empty(t, b.take())
	sr.Generation = gen + 1
	for _, m := range []string{idA, idB} {
		as := kmsg.NewSyncGroupRequestGroupAssignment()
		as.MemberID, as.MemberAssignment = m, []byte("for-"+m)
		sr.GroupAssignment = append(sr.GroupAssignment, as)
	}
	a.send(sr)
	require.Equal(t, "for-"+idA, string(one(t, a).(*kmsg.SyncGroupResponse).MemberAssignment))
	b.s.Poll(b.now)
	require.Equal(t, "for-"+idB, string(one(t, b).(*kmsg.SyncGroupResponse).MemberAssignment))

	// Commits by members: the generation must match.
	require.Equal(t, int16(0), commitCode(t, b, commitReq(2, "g", gen+1, idB, "a", 5, "")))
	require.Equal(t, int16(22), commitCode(t, b, commitReq(2, "g", gen, idB, "a", 5, "")))
	require.Equal(t, int16(25), commitCode(t, b, commitReq(2, "g", gen+1, "zz", "a", 5, "")))

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Version, dg.Groups, dg.IncludeAuthorizedOperations = 3, []string{"g", "unknown"}, true
	a.send(dg)
	d := one(t, a).(*kmsg.DescribeGroupsResponse)
	require.Equal(t, "Stable", d.Groups[0].State)
	require.Equal(t, "range", d.Groups[0].Protocol)
	require.Len(t, d.Groups[0].Members, 2)
	require.Equal(t, "for-"+idB, string(d.Groups[0].Members[1].MemberAssignment))
	require.Equal(t, "test", d.Groups[0].Members[0].ClientID)
	require.Equal(t, "Dead", d.Groups[1].State)
	require.Equal(t, int32(1<<3|1<<6|1<<8), d.Groups[0].AuthorizedOperations)

	lg := kmsg.NewPtrListGroupsRequest()
	lg.Version = 3
	a.send(lg)
	l := one(t, a).(*kmsg.ListGroupsResponse)
	require.Len(t, l.Groups, 1)
	require.Equal(t, "consumer", l.Groups[0].ProtocolType)

	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Version, lv.Group, lv.MemberID = 2, "g", idA
	a.send(lv)
	require.Equal(t, int16(0), one(t, a).(*kmsg.LeaveGroupResponse).ErrorCode)
	a.send(lv)
	require.Equal(t, int16(25), one(t, a).(*kmsg.LeaveGroupResponse).ErrorCode)
	hb.MemberID, hb.Generation = idB, gen+1
	b.send(hb)
	require.Equal(t, int16(27), one(t, b).(*kmsg.HeartbeatResponse).ErrorCode)
}

// A parked JoinGroup is answered at the rebalance deadline, driven by Poll
// with the time passed in.
func TestGroupJoinRebalanceTimeoutByPoll(t *testing.T) {
	a, g := groupHarness(t, kafka.ProfileKafka0102)
	b := peer(t, a, g)
	a.send(joinReq(1, ""))
	ra := one(t, a).(*kmsg.JoinGroupResponse)
	b.send(joinReq(1, ""))
	require.Empty(t, b.take()) // waits for a, which never rejoins
	dl := b.out.Deadline
	require.NotZero(t, dl)
	b.now = dl
	b.s.Poll(b.now)
	rb := one(t, b).(*kmsg.JoinGroupResponse)
	require.Equal(t, int16(0), rb.ErrorCode)
	require.Equal(t, rb.MemberID, rb.LeaderID, "a was dropped: b leads")
	require.Equal(t, ra.Generation+1, rb.Generation)
}

var _ = kafkatest.ErrInjected

// Every served version of every group key passes the allocation guard with
// populated arrays (the guard's grammar matches kmsg's) and is answered.
func TestGroupShapesEveryVersion(t *testing.T) {
	h, _ := groupHarness(t, kafka.ProfileModern)
	reqs := []func(v int16) kmsg.Request{
		func(v int16) kmsg.Request { r := joinReq(v, "m"); return r },
		func(v int16) kmsg.Request {
			r := kmsg.NewPtrSyncGroupRequest()
			r.Version, r.Group, r.MemberID = v, "g", "m"
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = "m", []byte{1, 2}
			r.GroupAssignment = append(r.GroupAssignment, a)
			return r
		},
		func(v int16) kmsg.Request { return commitReq(v, "g", -1, "", "a", 1, "x") },
		func(v int16) kmsg.Request { return fetchOffsetsReq(v, "g", "a") },
		func(v int16) kmsg.Request {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Version, r.Groups = v, []string{"g", "h"}
			return r
		},
		func(v int16) kmsg.Request { r := kmsg.NewPtrListGroupsRequest(); r.Version = v; return r },
		func(v int16) kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.Version, r.CoordinatorKey = v, "g"
			return r
		},
		func(v int16) kmsg.Request {
			r := kmsg.NewPtrHeartbeatRequest()
			r.Version, r.Group, r.MemberID = v, "g", "m"
			return r
		},
		func(v int16) kmsg.Request {
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Version, r.Group, r.MemberID = v, "g", "m"
			return r
		},
	}
	maxes := map[int16]int16{11: 6, 14: 4, 8: 8, 9: 6, 15: 5, 16: 3, 10: 3, 12: 4, 13: 4}
	for _, mk := range reqs {
		key := mk(0).Key()
		for v := int16(0); v <= maxes[key]; v++ {
			h.send(mk(v))
			got := h.take()
			require.Len(t, got, 1, "%s v%d", kmsg.NameForKey(key), v)
			require.False(t, h.out.Close, "%s v%d: %s", kmsg.NameForKey(key), v, h.out.Reason)
		}
		// One version above the profile closes the connection.
		h2, _ := groupHarness(t, kafka.ProfileModern)
		h2.send(mk(maxes[key] + 1))
		h2.take()
		require.True(t, h2.out.Close, "%s v%d", kmsg.NameForKey(key), maxes[key]+1)
	}
}

// A coordinator that cannot confirm its leadership (a deposed leader that
// does not know it yet: its read fences fail or never complete) serves no
// stale offsets and runs no rebalance: OffsetFetch waits for a fence that
// began after it arrived, and after a leadership change every group request
// gets COORDINATOR_LOAD_IN_PROGRESS until the leadership is confirmed.
func TestDeposedCoordinatorIsFenced(t *testing.T) {
	h, g := groupHarness(t, kafka.ProfileModern)
	require.Equal(t, int16(0), commitCode(t, h, commitReq(6, "simple", -1, "", "a", 7, "")))
	offsets := h.be.StreamByName(kafka.DefaultOffsetsTopic)

	// OffsetFetch behind a fence that never completes: NOT_COORDINATOR.
	offsets.HoldFences()
	h.send(fetchOffsetsReq(5, "simple", "a"))
	require.Empty(t, h.take(), "no answer before the fence")
	h.now += 2e9
	h.s.Poll(h.now)
	require.Equal(t, int16(16), one(t, h).(*kmsg.OffsetFetchResponse).ErrorCode)

	// A fence that passes: the committed offset.
	release := offsets.HoldFences()
	h.send(fetchOffsetsReq(5, "simple", "a"))
	release(nil)
	h.s.Poll(h.now)
	require.Equal(t, int64(7), one(t, h).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset)

	// Leadership moves away and comes back: a new coordinator term, not
	// confirmed while the fence is held.
	offsets.SetLeader(2)
	h.send(fetchOffsetsReq(5, "simple", "a"))
	require.Equal(t, int16(16), one(t, h).(*kmsg.OffsetFetchResponse).ErrorCode)
	release = offsets.HoldFences()
	offsets.SetLeader(1)
	h.send(joinReq(4, ""))
	require.Equal(t, int16(14), one(t, h).(*kmsg.JoinGroupResponse).ErrorCode, "COORDINATOR_LOAD_IN_PROGRESS until confirmed")
	release(nil)
	g.Tick(h.now)
	h.send(joinReq(4, ""))
	require.Equal(t, int16(79), one(t, h).(*kmsg.JoinGroupResponse).ErrorCode, "confirmed: MEMBER_ID_REQUIRED, the join goes on")
}

// The offsets log is compacted: once it holds CompactAfter records, the
// coordinator writes a checkpoint of every key's latest commit and deletes
// the log below it. A coordinator that replays what is left (a new leader)
// has every latest commit — also one made after the checkpoint was built,
// which the checkpoint's older repeat must not overwrite.
func TestOffsetsLogCompaction(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.be.AddStream(kafka.DefaultOffsetsTopic)
	h.be.AddStream("c")
	g := kafka.NewGroups(kafka.GroupsConfig{CompactAfter: 30}, h.be)
	s, err := kafka.NewSessionWithGroups(kafka.Config{}, h.be, g, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	for i := range 40 {
		for _, topic := range []string{"a", "b", "c"} {
			require.Equal(t, int16(0), commitCode(t, h, commitReq(2, "simple", -1, "", topic, int64(i), "")))
		}
	}
	g.Tick(h.now) // the checkpoint
	require.Equal(t, int16(0), commitCode(t, h, commitReq(2, "simple", -1, "", "a", 100, "")), "a commit after the checkpoint")
	g.Tick(h.now) // the retention
	st := g.Status(h.now, nil)
	require.Greater(t, st.AppliedOffset, int64(120))
	view, err := h.be.Log(kafka.DefaultOffsetsTopic)
	require.NoError(t, err)
	require.Greater(t, view.StartOffset(), int64(100), "the log below the checkpoint is gone")

	replay := kafka.NewGroups(kafka.GroupsConfig{}, h.be)
	p := peer(t, h, replay)
	for topic, want := range map[string]int64{"a": 100, "b": 39, "c": 39} {
		p.send(fetchOffsetsReq(5, "simple", topic))
		require.Equal(t, want, one(t, p).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0].Offset, topic)
	}
}
