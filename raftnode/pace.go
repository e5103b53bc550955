package raftnode

import (
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Catch-up pacing (Config.LearnerBytesPerTick): the appends a leader sends
// to learners — a replica being added by a move, catching up — share a
// token bucket of LearnerBytesPerTick bytes per tick, so a move does not
// take the server's disk and network from its voters. An append to a
// learner is split into appends of at most a tick's budget (each a valid
// Raft append: the previous entry's index and term, then its entries; at
// least one entry each) that wait in a FIFO released tick by tick as the
// bucket allows; an append whose entries a waiting one already carries (a
// retransmission) is dropped. Appends to voters, heartbeats and everything
// else are never held. Raft tolerates the delay like a slow link (its
// inflight window bounds what waits). The bucket holds at most one tick's
// worth and may go below zero by one append, so over any span of t ticks
// at most (t+1) budgets and one append leave for learners. Ticks are the
// clock: deterministic, as the simulator needs. The snapshot install path
// (entries a learner copies from peers) is paced apart, in real time, by
// PacedFetch.
type pacer struct {
	tokens int64
	held   []Send
	bytes  int64 // bytes of appends sent to learners
	// sent: per (group, learner), the last entry of the last append
	// released to it, in which term and at which tick. Raft probes a
	// learner again on every heartbeat answer until an append is
	// acknowledged; a probe for what went out within the last
	// resendTicks is dropped (a lost one is probed again after that).
	sent map[[2]uint64]sentApp
}

type sentApp struct{ last, term, tick uint64 }

// resendTicks is how long an append released to a learner stands for the
// same entries probed again.
const resendTicks = 3

// appBytes is what an append costs: its entries' data.
func appBytes(m *raftpb.Message) int64 {
	var n int64
	for _, e := range m.Entries {
		n += int64(len(e.Data))
	}
	return n
}

// paced reports whether e is an append to a learner, which the pacing then
// owns: split, held and sent as the bucket allows.
func (n *Node) paced(e Send) bool {
	limit := n.cfg.Core.LearnerBytesPerTick
	if limit <= 0 || e.Msg.GetType() != raftpb.MsgApp || len(e.Msg.Entries) == 0 || !n.isLearner(e.Group, e.Msg.GetTo()) {
		return false
	}
	p := &n.pace
	last := e.Msg.Entries[len(e.Msg.Entries)-1].GetIndex()
	for _, h := range p.held {
		if h.Group == e.Group && h.Msg.GetTo() == e.Msg.GetTo() && h.Msg.Entries[len(h.Msg.Entries)-1].GetIndex() >= last &&
			h.Msg.GetTerm() == e.Msg.GetTerm() && h.Msg.GetIndex() <= e.Msg.GetIndex() {
			return true // a retransmission of what waits
		}
	}
	key := [2]uint64{e.Group, e.Msg.GetTo()}
	if sa, ok := p.sent[key]; ok && sa.last >= last && sa.term == e.Msg.GetTerm() && n.ticks-sa.tick < resendTicks {
		return true // the same entries just went out: a probe's retransmission
	}
	p.held = append(p.held, split(e, limit)...)
	n.releasePaced()
	return true
}

// split cuts an append into appends of at most limit bytes of entries
// (at least one entry each), each naming the entry before its first.
func split(e Send, limit int64) []Send {
	m := e.Msg
	var out []Send
	ents := m.Entries
	prevIndex, prevTerm := m.GetIndex(), m.GetLogTerm()
	for len(ents) > 0 {
		k, size := 0, int64(0)
		for k < len(ents) && (k == 0 || size+int64(len(ents[k].Data)) <= limit) {
			size += int64(len(ents[k].Data))
			k++
		}
		c := cloneApp(m)
		c.Index, c.LogTerm, c.Entries = new(prevIndex), new(prevTerm), ents[:k]
		out = append(out, Send{Group: e.Group, Msg: c})
		prevIndex, prevTerm = ents[k-1].GetIndex(), ents[k-1].GetTerm()
		ents = ents[k:]
	}
	return out
}

// cloneApp copies an append's header fields (not its entries).
func cloneApp(m *raftpb.Message) *raftpb.Message {
	return &raftpb.Message{Type: m.Type, To: m.To, From: m.From, Term: m.Term, LogTerm: m.LogTerm, Index: m.Index,
		Commit: m.Commit, Reject: m.Reject, RejectHint: m.RejectHint, Context: m.Context}
}

// releasePaced sends the waiting appends the bucket allows.
func (n *Node) releasePaced() {
	p := &n.pace
	for len(p.held) > 0 && p.tokens > 0 {
		e := p.held[0]
		p.held = p.held[1:]
		if _, ok := n.logs[e.Group]; !ok {
			continue // the group is gone
		}
		size := appBytes(e.Msg)
		p.tokens -= size
		p.bytes += size
		if p.sent == nil {
			p.sent = map[[2]uint64]sentApp{}
		}
		p.sent[[2]uint64{e.Group, e.Msg.GetTo()}] = sentApp{last: e.Msg.Entries[len(e.Msg.Entries)-1].GetIndex(), term: e.Msg.GetTerm(), tick: n.ticks}
		n.sendNow(e)
	}
	if len(p.held) == 0 {
		p.held = nil
	}
}

// paceAnswer sees a learner's answer to an append: a rejection (an append
// lost, or delivered out of order) makes raft probe from what the learner
// has, so the appends still waiting for it are dropped rather than sent
// after a gap they cannot fill.
func (n *Node) paceAnswer(group uint64, m *raftpb.Message) {
	p := &n.pace
	if len(p.held) == 0 || m.GetType() != raftpb.MsgAppResp || !m.GetReject() {
		return
	}
	from := m.GetFrom()
	p.held = slices.DeleteFunc(p.held, func(e Send) bool { return e.Group == group && e.Msg.GetTo() == from })
	delete(p.sent, [2]uint64{group, from})
}

// isLearner: to is a learner of group in the membership this node applied.
func (n *Node) isLearner(group, to uint64) bool {
	d, ok := n.durable[group]
	if !ok || d.Conf == nil {
		return false
	}
	for _, id := range d.Conf.GetLearners() {
		if id == to {
			return true
		}
	}
	return false
}

// paceTick refills the bucket and sends what it now allows.
func (n *Node) paceTick() {
	limit := n.cfg.Core.LearnerBytesPerTick
	if limit <= 0 {
		return
	}
	n.pace.tokens = min(n.pace.tokens+limit, limit)
	n.releasePaced()
}

// LearnerBytes is how many bytes of appends this node sent to learners
// under the pacing (0 without it).
func (n *Node) LearnerBytes() int64 { return n.pace.bytes }

// PacedFetch paces a snapshot install's entry copies (the catch-up of a
// replica whose log is empty or behind the leader's start: a replica a
// move adds starts so) to bytesPerSec, shared by every install of the
// server: after each chunk, the installer waits until the bucket (one
// second's worth at most) has paid for it. wait sleeps for d, false when
// the server stops. The rate over any span of t seconds is at most
// (t+1)*bytesPerSec plus one chunk.
func PacedFetch(fetch EntryFetcher, bytesPerSec int64, now func() time.Time, wait func(time.Duration) bool) EntryFetcher {
	var mu sync.Mutex
	tokens, last := bytesPerSec, now()
	return func(group, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
		ents, prev, err := fetch(group, peer, from, to)
		if err != nil {
			return ents, prev, err
		}
		var size int64
		for _, e := range ents {
			size += int64(len(e.Data))
		}
		mu.Lock()
		t := now()
		tokens = min(tokens+int64(float64(bytesPerSec)*t.Sub(last).Seconds()), bytesPerSec)
		last = t
		tokens -= size
		debt := tokens
		mu.Unlock()
		if debt < 0 && !wait(time.Duration(float64(-debt)/float64(bytesPerSec)*float64(time.Second))) {
			return nil, 0, ErrStopped
		}
		return ents, prev, nil
	}
}
