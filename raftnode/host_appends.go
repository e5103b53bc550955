package raftnode

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// appendClock times appends between servers, for the metrics: a commit's
// time is a leader's append reaching a follower and the follower making it
// durable, and the commit histogram alone cannot tell a slow peer or a slow
// wire from a slow disk (docs/performance.md, "A paced append, stage by
// stage", needed a patch of timestamps to see it).
//
//   - On a leader, an append's round trip to each follower: from the
//     MsgApp handed to the transport to that follower's answer covering
//     it (the wire both ways and the follower's write and fdatasync).
//   - On a follower, an append's durability: from the MsgApp's arrival to
//     the answer that acknowledges it (stepping, writing, syncing).
//
// It is the Host's (the driver has the clock; the Core has none) and only
// the loop touches it, with the messages clocked selects. It keeps at most
// maxTimedAppends appends per group and follower (the oldest go untimed),
// and nothing for a group with none awaiting an answer: memory follows
// activity, not the number of groups. An answer covering several appends
// is timed from the latest of them (a retried append's answer times the
// retry); the older ones are dropped.
type appendClock struct {
	sent      map[uint64]map[uint64][]timedAppend // group -> follower -> appends awaiting its answer, oldest first
	arrived   map[uint64][]timedAppend            // group -> appends not yet acknowledged here, oldest first
	roundTrip func(peer uint64, d time.Duration)
	durable   func(d time.Duration)
}

type timedAppend struct {
	last uint64 // the append's last index
	at   time.Time
}

// maxTimedAppends bounds the appends timed per group and follower, above
// the appends a leader keeps in flight to one follower (raft's
// MaxInflightMsgs).
const maxTimedAppends = 64

func newAppendClock(roundTrip func(peer uint64, d time.Duration), durable func(time.Duration)) *appendClock {
	return &appendClock{sent: map[uint64]map[uint64][]timedAppend{}, arrived: map[uint64][]timedAppend{},
		roundTrip: roundTrip, durable: durable}
}

// clocked reports whether m is a message the clock times: an append with
// entries, or an answer accepting one.
func clocked(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MsgApp:
		return len(m.GetEntries()) > 0
	case raftpb.MsgAppResp:
		return !m.GetReject()
	}
	return false
}

// sending notes a message this server sends at now: an append to a
// follower starts its round trip; a follower's answer ends the durability
// of the appends it acknowledges.
func (c *appendClock) sending(group uint64, m *raftpb.Message, now time.Time) {
	switch m.GetType() {
	case raftpb.MsgApp:
		delete(c.arrived, group) // leading now: nothing from a former leader will be answered
		peers := c.sent[group]
		if peers == nil {
			peers = map[uint64][]timedAppend{}
			c.sent[group] = peers
		}
		peers[m.GetTo()] = push(peers[m.GetTo()], timedAppend{appendEnd(m), now})
	case raftpb.MsgAppResp:
		if at, ok := take(c.arrived, group, m.GetIndex()); ok && c.durable != nil {
			c.durable(now.Sub(at))
		}
	}
}

// received notes a message that arrived at now: an append from the
// leader starts its durability; a follower's answer ends the round trip
// of the appends it acknowledges.
func (c *appendClock) received(group uint64, m *raftpb.Message, now time.Time) {
	switch m.GetType() {
	case raftpb.MsgApp:
		delete(c.sent, group) // following now: what it sent leading will not be answered
		c.arrived[group] = push(c.arrived[group], timedAppend{appendEnd(m), now})
	case raftpb.MsgAppResp:
		peers := c.sent[group]
		if at, ok := take(peers, m.GetFrom(), m.GetIndex()); ok && c.roundTrip != nil {
			c.roundTrip(m.GetFrom(), now.Sub(at))
		}
		if len(peers) == 0 {
			delete(c.sent, group)
		}
	}
}

// forget drops what is kept of a group that is no longer hosted.
func (c *appendClock) forget(group uint64) {
	delete(c.arrived, group)
	delete(c.sent, group)
}

// push queues a, dropping the oldest beyond maxTimedAppends.
func push(q []timedAppend, a timedAppend) []timedAppend {
	if len(q) >= maxTimedAppends {
		q = q[1:]
	}
	return append(q, a)
}

// take removes from m[k] the appends an answer acknowledging index covers
// (m[k] too once empty) and returns when the latest of them started.
func take(m map[uint64][]timedAppend, k, index uint64) (time.Time, bool) {
	q := m[k]
	n := 0
	for n < len(q) && q[n].last <= index {
		n++
	}
	if n == 0 {
		return time.Time{}, false
	}
	at := q[n-1].at
	if n == len(q) {
		delete(m, k)
	} else {
		m[k] = q[n:]
	}
	return at, true
}

// appendEnd is the last index of an append's entries.
func appendEnd(m *raftpb.Message) uint64 {
	es := m.GetEntries()
	return es[len(es)-1].GetIndex()
}
