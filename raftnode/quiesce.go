package raftnode

import (
	"bytes"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence: a group with nothing to replicate stops ticking, so it sends
// no heartbeats and runs no election timer; an idle server then costs
// nothing per group. CockroachDB and TiKV do the same for their ranges.
//
// The leader quiesces a group once every replica has its whole log
// committed and applied, nothing is proposed, read, transferred or being
// written, and every replica was heard from recently. It tells each
// follower with a quiesce heartbeat (a MsgHeartbeat carrying quiesceCtx);
// a follower quiesces only if it agrees (same term and leader, same last
// index and commit, all applied), and otherwise steps it as an ordinary
// heartbeat, whose answer wakes the leader.
//
// What the groups' heartbeats told (is my leader, are my followers alive)
// is told for all quiesced groups at once by one liveness heartbeat per
// server pair and heartbeat interval (a MsgHeartbeat in LivenessGroup).
// When a peer has not been heard from (in any group) for an election
// timeout, or the transport cannot reach it, the quiesced groups it leads
// wake. Those this server leads with it as a replica sleep on without it
// while the rest of their voters are a quorum (its first message in the
// group wakes the group), and wake when they are not. A woken follower's
// election clock is first moved on by the time its leader's server has
// been silent, so a dead leader is replaced as fast as if the group had
// never slept, by the replicas left in the order of succession.go.
//
// Any proposal, read fence, leadership transfer, campaign, delivery report
// or peer message of a group wakes it. Reads stay linearizable: a fence is
// a ReadIndex, which wakes the group and still needs a quorum's answer in
// the leader's term; a quiesced leader that was cut off gets none, and
// its liveness heartbeats stop arriving, so it wakes and CheckQuorum makes
// it step down.
//
// All of it is decided here, from ticks and messages, in sorted order: the
// drivers only carry the messages.

// LivenessGroup is the group id of the per-server-pair liveness heartbeat.
// No stream uses it (group ids start at 1).
const LivenessGroup uint64 = 0

// quiesceCtx marks the heartbeat that quiesces a follower. Its length
// differs from a read index context's (8 bytes), so raft's own
// heartbeats are never mistaken for it.
var quiesceCtx = []byte("vdl/quiesce")

// quiesceAfter is how many consecutive ticks a leader's group must be idle
// before it quiesces: bursts of proposals do not make it flap.
const quiesceAfter = 3

// quietGroup is a quiesced group: whether this server leads it, its
// leader, and its other replicas: those alive when it quiesced (peers),
// and, on a leader, those gone silent (dead).
type quietGroup struct {
	leader bool
	lead   uint64
	peers  []uint64
	dead   []uint64
	// slept are the dead replicas it went on sleeping without when their
	// server fell silent (sleepWithout): they had its whole log then.
	slept []uint64
	// at is the node tick up to which the group's own tick count is
	// brought (syncTicks): Tick skips quiesced groups.
	at uint64
	// status is the group's status once asked (Status): nothing in it
	// changes while the group sleeps, and a server reports every group's
	// status every few seconds. nil: not asked yet, or stepped since.
	status *GroupStatus
}

// quiescence is the core's quiescence state.
type quiescence struct {
	ticks uint64
	quiet map[uint64]*quietGroup // quiesced groups
	idle  map[uint64]int         // led groups idle for that many ticks
	// peers counts the quiesced groups each peer is a replica of: the
	// servers that liveness heartbeats go to and are expected from.
	peers   map[uint64]int
	heard   map[uint64]uint64 // peer -> tick last heard from (peers only)
	expired map[uint64]bool   // peers whose silence already woke their groups
	// probeNext is where the pass of probeDead is in the group ids;
	// probeAt the tick the next pass starts.
	probeNext int
	probeAt   uint64
	// drowsy are the quiesced followers that have a RawNode, to drop at
	// the next tick (hibernate.go).
	drowsy map[uint64]struct{}
}

func newQuiescence() quiescence {
	return quiescence{quiet: map[uint64]*quietGroup{}, idle: map[uint64]int{}, peers: map[uint64]int{},
		heard: map[uint64]uint64{}, expired: map[uint64]bool{}, drowsy: map[uint64]struct{}{}}
}

// Quiesced reports whether the group is quiesced (tests, status).
func (c *Core) Quiesced(group uint64) bool { return c.q.quiet[group] != nil }

// heardFrom records that a peer's server is alive. Only peers of quiesced
// groups are tracked: what arrives from the network allocates nothing.
func (c *Core) heardFrom(peer uint64) {
	if _, ok := c.q.peers[peer]; ok {
		c.q.heard[peer] = c.q.ticks
		if c.q.expired[peer] {
			delete(c.q.expired, peer)
			c.peerBack(peer)
		}
	}
}

// peerBack takes a server heard from again after a silence (or followed
// again, by a group that quiesced with it) back into the quiesced groups
// that slept on without it (sleepWithout), without waking them: its
// replica had their whole log, and nothing was written since. If its
// process restarted meanwhile, its replica is awake and its first
// message in the group (a pre-vote, once its election timer runs out)
// wakes the group; if it only stalled (a paused process, a one-way
// partition), its quiesced replica kept hearing this server's liveness
// heartbeats and never sends anything in the group — before, the group
// counted it dead for as long as it slept: the replica was reported
// inactive, so the balancer never moved an idle stream's leader back to
// it (simulator seed 850: a paused server in the preferred DC).
func (c *Core) peerBack(peer uint64) {
	for _, id := range c.ids {
		q := c.q.quiet[id]
		if q == nil || !q.leader || !slices.Contains(q.slept, peer) {
			continue
		}
		drop := func(p uint64) bool { return p == peer }
		q.slept = slices.DeleteFunc(slices.Clone(q.slept), drop)
		q.dead = slices.DeleteFunc(slices.Clone(q.dead), drop)
		q.peers = append(slices.Clone(q.peers), peer)
		slices.Sort(q.peers)
		q.status = nil
		c.q.peers[peer]++
	}
}

// stepLiveness handles a liveness heartbeat.
func (c *Core) stepLiveness(m *raftpb.Message) {
	if m.GetType() == raftpb.MsgHeartbeat && m.GetFrom() != c.cfg.ID {
		c.heardFrom(m.GetFrom())
	}
}

// tickQuiescence runs after every tick: liveness heartbeats, the groups
// whose peers fell silent, and the led groups that may quiesce.
func (c *Core) tickQuiescence() {
	c.q.ticks++
	peers := sortedGroups(c.q.peers)
	if c.q.ticks%uint64(c.cfg.HeartbeatTick) == 0 {
		for _, p := range peers {
			c.emit(Send{Group: LivenessGroup, Msg: &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(c.cfg.ID), To: new(p)}})
		}
	}
	for _, p := range peers {
		if c.q.expired[p] || c.q.ticks-c.q.heard[p] < uint64(c.cfg.ElectionTick) {
			continue
		}
		c.q.expired[p] = true
		c.wakePeer(p)
	}
	c.hibernateDrowsy()
	if c.cfg.NoQuiesce {
		return
	}
	c.probeDead()
	for _, id := range c.awakeIDs() {
		g := c.groups[id]
		if g.role != raft.StateLeader || c.q.quiet[id] != nil {
			continue
		}
		if !c.idleLeader(g) {
			delete(c.q.idle, id)
			continue
		}
		c.q.idle[id]++
		if c.q.idle[id] >= quiesceAfter {
			c.quiesceLeader(g)
		}
	}
}

// wakePeer wakes the quiesced groups that peer leads here; those this
// server leads with peer as a replica sleep on without it if they can
// (sleepWithout), and wake otherwise: what their heartbeats would have
// noticed if peer's server is gone.
func (c *Core) wakePeer(peer uint64) {
	if _, ok := c.q.peers[peer]; !ok {
		return
	}
	for _, id := range c.ids {
		q := c.q.quiet[id]
		switch {
		case q == nil:
			c.succeedAwake(c.groups[id], peer)
		case !q.leader && q.lead == peer:
			silent := c.q.ticks - c.q.heard[peer] // before wake forgets peer
			c.wake(c.groups[id])
			c.succeed(c.groups[id], peer, silent)
		case q.leader && slices.Contains(q.peers, peer) && !c.sleepWithout(c.groups[id], q, peer):
			c.wake(c.groups[id])
		}
	}
}

// Probing the groups that sleep without a replica (probeDead): a pass over
// the groups every probeEvery election timeouts, spread over one election
// timeout, waking at most probeWakes groups a tick.
const (
	probeEvery = 10
	probeWakes = 8
)

// probeDead wakes, now and then, the quiesced groups this server leads
// that sleep without a replica: one silent in the group may be alive, and
// stuck asleep in an older term — a leader that quiesced its group before
// a one-way partition let the others elect a new leader it never heard
// of, or a follower of that old leader — and nothing else would reach it: the new leader sends
// nothing to a replica it sleeps without, and the old one, asleep, sends
// nothing at all (simulator seeds 148 and 574 with the control plane: two
// quiesced leaders of one group in terms 2 and 3, for good, and the
// balancer waiting for the stale one to catch up). Woken, the group
// heartbeats it: it answers (or steps down, seeing the term) and is
// caught up; if it does not, the group sleeps on without it three ticks
// later, until the next pass. Its server's liveness is no guide: neither
// side follows the other's once each sleeps without the other. Paced,
// because waking thousands of groups at once is what a stopped or
// restarted server's peers must not do (sleepWithout): a server down for
// good costs each peer probeWakes woken groups a tick, each heartbeating
// for three ticks.
func (c *Core) probeDead() {
	if c.q.ticks < c.q.probeAt {
		return
	}
	budget := probeWakes
	for n := max(1, len(c.ids)/c.cfg.ElectionTick); n > 0 && budget > 0 && c.q.probeNext < len(c.ids); n-- {
		id := c.ids[c.q.probeNext]
		c.q.probeNext++
		if q := c.q.quiet[id]; q != nil && q.leader && len(q.dead) > 0 {
			c.wake(c.groups[id])
			budget--
		}
	}
	if c.q.probeNext >= len(c.ids) {
		c.q.probeNext = 0
		c.q.probeAt = c.q.ticks + uint64(probeEvery*c.cfg.ElectionTick)
	}
}

// sleepWithout keeps a quiesced leader's group asleep without a replica
// whose server fell silent, and reports whether it could: the replica is
// a voter (a learner never campaigns, so nothing would wake the group
// when it is back), and the live voters are still a quorum. That is where
// idleLeader's dead-replica rule puts the group a few ticks after waking
// it; waking first made every group a stopped server was a replica of
// heartbeat at once, thousands per server, whose answers came later than
// CheckQuorum waits under that load, and leaders stepped down in
// thousands.
func (c *Core) sleepWithout(g *group, q *quietGroup, peer uint64) bool {
	voters, live, voter := 0, 0, false
	c.raw(g).WithProgress(func(id uint64, typ raft.ProgressType, _ tracker.Progress) {
		if typ != raft.ProgressTypePeer {
			return
		}
		voters++
		switch {
		case id == peer:
			voter = true
		case id == c.cfg.ID || slices.Contains(q.peers, id):
			live++
		}
	})
	if !voter || live <= voters/2 {
		return false
	}
	q.peers = slices.DeleteFunc(slices.Clone(q.peers), func(p uint64) bool { return p == peer })
	q.dead = append(slices.Clone(q.dead), peer)
	slices.Sort(q.dead)
	q.slept = append(slices.Clone(q.slept), peer)
	q.status = nil
	c.unpeer(peer)
	return true
}

// unpeer counts one quiesced group less that peer is a replica of; at
// none, its liveness is no longer tracked.
func (c *Core) unpeer(peer uint64) {
	if c.q.peers[peer]--; c.q.peers[peer] <= 0 {
		delete(c.q.peers, peer)
		delete(c.q.heard, peer)
		delete(c.q.expired, peer)
	}
}

// idleLeader reports whether a led group has nothing left to do: every
// live replica holds, and this server has applied, the whole log,
// committed in this term, with nothing proposed, read, written or
// transferred, every live replica was heard from within half an election
// timeout, and the live voters are a quorum. A voter not heard from for
// more than an election timeout is dead (silent): the group may sleep
// without it (not without a silent learner, which never campaigns), and wakes when it is heard from again (CockroachDB quiesces
// ranges with replicas on dead nodes likewise); any message of the group
// from it wakes the group (its server is back: its follower's election
// timeout sends a pre-vote). Otherwise a dead server woke every group it
// was a replica of for as long as it stayed down, and the others'
// heartbeats to it cost the servers left more than the groups' work.
// (Waking every such group at the returning server's first message was
// worse: while it reopened 10,000 streams over minutes, each message woke
// thousands of groups whose replica there was not open yet, which slept
// again three ticks later.)
func (c *Core) idleLeader(g *group) bool {
	if len(g.queued) > 0 || len(g.pending) > 0 || len(g.reads) > 0 || g.appending > 0 || g.waiting != nil {
		return false
	}
	bs := c.raw(g).BasicStatus()
	if bs.LeadTransferee != 0 || bs.GetCommit() != g.applied {
		return false
	}
	last, err := g.st.LastIndex()
	if err != nil || last != bs.GetCommit() {
		return false
	}
	if t, err := g.st.Term(last); err != nil || t != bs.GetTerm() {
		return false
	}
	idle := true
	voters, live := 0, 0
	c.raw(g).WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		voter := typ == raft.ProgressTypePeer
		if voter {
			voters++
		}
		if id == c.cfg.ID {
			live++ // a leader is a voter
			return
		}
		if c.silent(g, id) {
			// A silent voter wakes the group when it is back (its
			// pre-vote); a learner never campaigns, so nothing would.
			idle = idle && voter
			return
		}
		heard, ok := g.heard[id]
		if pr.Match != last || pr.State != tracker.StateReplicate || pr.IsPaused() ||
			!ok || g.ticks-heard > uint64(c.cfg.ElectionTick)/2 {
			idle = false
		}
		if voter {
			live++
		}
	})
	return idle && live > voters/2
}

// silent reports whether a led group's replica has not been heard from in
// the group for more than an election timeout (one never heard from is
// not: it may be a replica just added, not contacted yet). A quiesced
// group hears nothing while it sleeps: its silent replicas are those it
// slept without.
func (c *Core) silent(g *group, id uint64) bool {
	if q := c.q.quiet[g.id]; q != nil {
		return slices.Contains(q.dead, id)
	}
	heard, ok := g.heard[id]
	return ok && g.ticks-heard > uint64(c.cfg.ElectionTick)
}

// quiesceLeader quiesces a led group and tells its followers.
func (c *Core) quiesceLeader(g *group) {
	bs := c.raw(g).BasicStatus()
	var peers, dead []uint64
	c.raw(g).WithProgress(func(id uint64, _ raft.ProgressType, _ tracker.Progress) { // in id order
		switch {
		case id == c.cfg.ID:
		case c.silent(g, id):
			dead = append(dead, id)
		default:
			peers = append(peers, id)
		}
	})
	for _, p := range peers {
		c.emit(Send{Group: g.id, Msg: &raftpb.Message{
			Type: raftpb.MsgHeartbeat.Enum(), From: new(c.cfg.ID), To: new(p), Term: new(bs.GetTerm()),
			Index: new(bs.GetCommit()), Commit: new(bs.GetCommit()), Context: quiesceCtx,
		}})
	}
	c.quiesce(g, &quietGroup{leader: true, lead: c.cfg.ID, peers: peers, dead: dead}, func(p uint64) uint64 { return g.heard[p] })
}

// quiesce records a group as quiesced.
func (c *Core) quiesce(g *group, q *quietGroup, heard func(peer uint64) uint64) {
	delete(c.q.idle, g.id)
	q.at = c.q.ticks
	c.q.quiet[g.id] = q
	c.awake = nil
	if !q.leader {
		c.q.drowsy[g.id] = struct{}{}
	}
	var back []uint64
	for _, p := range q.peers {
		untracked := c.q.peers[p] == 0
		c.q.peers[p]++
		// The group's own record of p, in group ticks, is as recent as
		// (ticks - (g.ticks - heard)) node ticks.
		at := c.q.ticks - min(c.q.ticks, g.ticks-min(g.ticks, heard(p)))
		if h, ok := c.q.heard[p]; !ok || at > h {
			c.q.heard[p] = at
			if c.q.expired[p] {
				untracked = true
			}
			delete(c.q.expired, p)
		}
		if untracked && !c.q.expired[p] {
			back = append(back, p)
		}
	}
	// A peer whose liveness was not followed (or had lapsed) is alive:
	// the groups that slept on without it count it back too.
	for _, p := range back {
		c.peerBack(p)
	}
}

// stepQuiesce handles a quiesce heartbeat: the follower quiesces if it
// agrees, and otherwise steps it as a plain heartbeat (whose answer wakes
// the leader).
func (c *Core) stepQuiesce(g *group, m *raftpb.Message) {
	if q := c.q.quiet[g.id]; q != nil && !q.leader && q.lead == m.GetFrom() && c.agrees(g, m) {
		return // already quiesced with this leader
	}
	c.wake(g)
	if !c.cfg.NoQuiesce && c.agrees(g, m) {
		var peers []uint64
		for _, id := range c.members(g.id) {
			if id != c.cfg.ID {
				peers = append(peers, id)
			}
		}
		if slices.Contains(peers, m.GetFrom()) {
			c.quiesce(g, &quietGroup{lead: m.GetFrom(), peers: peers}, func(p uint64) uint64 {
				if p == m.GetFrom() {
					return g.ticks
				}
				return g.heard[p]
			})
			return
		}
	}
	hb := &raftpb.Message{Type: m.Type, From: m.From, To: m.To, Term: m.Term, Commit: m.Commit}
	_ = c.raw(g).Step(hb)
	c.drain(g)
}

// agrees reports whether a follower is where the leader's quiesce
// heartbeat says the group is: same term and leader, the same whole log
// committed, all of it applied, nothing being written.
func (c *Core) agrees(g *group, m *raftpb.Message) bool {
	if g.role != raft.StateFollower || g.lead != m.GetFrom() || g.appending > 0 || g.waiting != nil || len(g.reads) > 0 {
		return false
	}
	bs := c.raw(g).BasicStatus()
	last, err := g.st.LastIndex()
	return err == nil && bs.GetTerm() == m.GetTerm() && bs.GetCommit() == m.GetCommit() && last == m.GetIndex() && g.applied == bs.GetCommit()
}

// isQuiesce reports whether m is a quiesce heartbeat.
func isQuiesce(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MsgHeartbeat && bytes.Equal(m.GetContext(), quiesceCtx)
}

// wake makes a quiesced group tick again. A follower's election clock is
// first moved on by the time its leader's server has been silent (at most
// an election timeout): that is how long raft's own heartbeats would have
// been missing.
func (c *Core) wake(g *group) {
	q := c.q.quiet[g.id]
	if q == nil {
		return
	}
	c.raw(g) // rebuilt while the group is still quiesced
	c.syncTicks(g)
	// While it slept its replicas' liveness heartbeats stood for their
	// answers: a woken group has heard from them as recently as those.
	for _, p := range q.peers {
		if h, ok := c.q.heard[p]; ok {
			at := g.ticks - min(g.ticks, c.q.ticks-h)
			if g.heard == nil {
				g.heard = map[uint64]uint64{}
			}
			if old, ok := g.heard[p]; !ok || at > old {
				g.heard[p] = at
			}
		}
	}
	delete(c.q.quiet, g.id)
	c.awake = nil
	var silent uint64
	if h, ok := c.q.heard[q.lead]; ok && !q.leader {
		silent = min(c.q.ticks-h, uint64(c.cfg.ElectionTick))
	}
	for _, p := range q.peers {
		c.unpeer(p)
	}
	for range silent {
		c.raw(g).Tick()
	}
	c.drain(g)
}

// forgetQuiet drops a removed group's quiescence state.
func (c *Core) forgetQuiet(id uint64) {
	delete(c.q.drowsy, id)
	switch g, q := c.groups[id], c.q.quiet[id]; {
	case g != nil && q != nil && g.rn == nil:
		// Hibernating: its raft is not rebuilt to be dropped (its log may
		// be closing).
		for _, p := range q.peers {
			c.unpeer(p)
		}
		delete(c.q.quiet, id)
		c.awake = nil
	case g != nil:
		c.wake(g)
	}
	delete(c.q.idle, id)
}

// quietAlive reports whether a replica of a quiesced group is alive by its
// server's liveness heartbeats (the group itself hears nothing while
// quiet).
func (c *Core) quietAlive(group, peer uint64) bool {
	h, ok := c.q.heard[peer]
	return c.q.quiet[group] != nil && ok && c.q.ticks-h < uint64(c.cfg.ElectionTick)
}

// Quiesced reports whether the group is quiesced on this server.
func (n *Node) Quiesced(group uint64) bool { return n.err == nil && n.core.Quiesced(group) }

// stepQuiet steps a message that changes nothing into a quiesced group
// without waking it, and reports whether it did: the answers to the
// leader's last heartbeats and appends, and a leader's heartbeat that was
// overtaken by its quiesce heartbeat, arrive after the group quiesced, and
// waking on them would keep every idle group awake. A leader that sees
// its group no longer idle after all wakes.
func (c *Core) stepQuiet(g *group, m *raftpb.Message) bool {
	q := c.q.quiet[g.id]
	if q == nil || m.GetTerm() != c.raw(g).BasicStatus().GetTerm() || slices.Contains(q.dead, m.GetFrom()) {
		return false // a replica it slept without is back: wake and catch it up
	}
	switch t := m.GetType(); {
	case q.leader && (t == raftpb.MsgHeartbeatResp || (t == raftpb.MsgAppResp && !m.GetReject())):
	case !q.leader && t == raftpb.MsgHeartbeat && m.GetFrom() == q.lead && len(m.GetContext()) == 0:
	default:
		return false
	}
	q.status = nil
	_ = c.raw(g).Step(m)
	c.drain(g)
	if q.leader && !c.idleLeader(g) {
		c.wake(g)
	}
	return true
}

// awakeIDs are the sorted ids of the groups not quiesced. The slice is
// shared until the next quiesce, wake, add or removal: never change it.
func (c *Core) awakeIDs() []uint64 {
	if c.awake == nil {
		c.awake = make([]uint64, 0, len(c.ids))
		for _, id := range c.ids {
			if c.q.quiet[id] == nil {
				c.awake = append(c.awake, id)
			}
		}
	}
	return c.awake
}

// syncTicks brings a quiesced group's tick count up to date. Tick skips
// quiesced groups, so each is owed one tick per node tick since it last
// caught up; whatever reads a group's ticks (Step, Status, wake) catches
// it up first, and the count is the same as if every tick had visited it.
func (c *Core) syncTicks(g *group) {
	if q := c.q.quiet[g.id]; q != nil {
		g.ticks += c.q.ticks - q.at
		q.at = c.q.ticks
	}
}
