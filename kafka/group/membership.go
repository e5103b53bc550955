package group

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Membership: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, the
// rebalance, and the passage of time (session and rebalance timeouts).

// Join handles a JoinGroup. The returned waiter may already be done; if
// not, it completes when the rebalance does (another member's call, or
// Advance at the rebalance deadline).
func (c *Coordinator) Join(now int64, r JoinRequest) *Waiter {
	w := newWaiter()
	fail := func(code int16) *Waiter {
		w.completeJoin(JoinResult{Err: code, Generation: -1, MemberID: r.MemberID})
		return w
	}
	if r.Group == "" {
		return fail(kerr.InvalidGroupID.Code)
	}
	if r.SessionTimeout < c.cfg.MinSessionTimeout || r.SessionTimeout > c.cfg.MaxSessionTimeout {
		return fail(kerr.InvalidSessionTimeout.Code)
	}
	g := c.group(r.Group, false)
	if g == nil {
		if r.MemberID != "" {
			return fail(kerr.UnknownMemberID.Code)
		}
		if c.liveGroups() >= c.cfg.MaxGroups {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		g = c.group(r.Group, true)
	}
	if g.state == Dead {
		return fail(kerr.CoordinatorNotAvailable.Code)
	}
	if !g.supports(r.ProtocolType, r.Protocols) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	if r.MemberID == "" {
		if old := g.staticMember(r.InstanceID); old != nil {
			c.replaceStaticMember(now, g, old, r, w)
			return w
		}
		if len(g.members)+len(g.pending) >= c.cfg.MaxMembers {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		if r.InstanceID != "" {
			// A new static member joins at once (Kafka asks only dynamic
			// members to come back with their id).
			c.addMemberAndRebalance(now, g, c.newMemberID(r.InstanceID), r, w)
			return w
		}
		id := c.newMemberID(r.ClientID)
		if r.RequireKnownMemberID {
			g.pending[id] = now + r.SessionTimeout
			g.pendingOrder = append(g.pendingOrder, id)
			w.completeJoin(JoinResult{Err: kerr.MemberIDRequired.Code, Generation: -1, MemberID: id})
			return w
		}
		c.addMemberAndRebalance(now, g, id, r, w)
		return w
	}
	if g.isPending(r.MemberID) {
		g.removePending(r.MemberID)
		c.addMemberAndRebalance(now, g, r.MemberID, r, w)
		return w
	}
	if g.fenced(r.MemberID, r.InstanceID) {
		return fail(kerr.FencedInstanceID.Code)
	}
	m := g.member(r.MemberID)
	if m == nil || (r.InstanceID != "" && g.staticMember(r.InstanceID) == nil) {
		// An unknown member, or a static member whose instance id the
		// group does not know (any more): it resets its id and rejoins.
		return fail(kerr.UnknownMemberID.Code)
	}
	m.clientID, m.host = r.ClientID, r.ClientHost
	switch g.state {
	case PreparingRebalance:
		c.updateMemberAndRebalance(now, g, m, r, w)
	case CompletingRebalance:
		if m.matches(r.Protocols) {
			m.lastHeartbeat = now
			w.completeJoin(c.joinResult(g, m))
		} else {
			c.updateMemberAndRebalance(now, g, m, r, w)
		}
	default: // Stable (Empty has no members)
		if m.id == g.leader || !m.matches(r.Protocols) {
			c.updateMemberAndRebalance(now, g, m, r, w)
		} else {
			m.lastHeartbeat = now
			w.completeJoin(c.joinResult(g, m))
		}
	}
	return w
}

func (c *Coordinator) joinResult(g *Group, m *member) JoinResult {
	r := JoinResult{Generation: g.generation, Protocol: g.protocol, Leader: g.leader, MemberID: m.id}
	if m.id == g.leader {
		r.Members = []MemberMetadata{}
		for _, o := range g.members {
			r.Members = append(r.Members, MemberMetadata{MemberID: o.id, InstanceID: o.instanceID, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (c *Coordinator) addMemberAndRebalance(now int64, g *Group, id string, r JoinRequest, w *Waiter) {
	m := &member{
		id: id, instanceID: r.InstanceID, clientID: r.ClientID, host: r.ClientHost,
		sessionTimeout: r.SessionTimeout, rebalanceTimeout: r.RebalanceTimeout,
		protocolType: r.ProtocolType, protocols: slices.Clone(r.Protocols),
		lastHeartbeat: now, awaitingJoin: w,
	}
	if len(g.members) == 0 {
		g.protocolType = r.ProtocolType
	}
	g.members = append(g.members, m)
	if r.InstanceID != "" {
		g.static[r.InstanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	c.prepareRebalance(now, g)
	c.tryCompleteJoin(now, g)
}

// replaceStaticMember: a static member rejoined with no member id (its
// process restarted) while the group still holds its instance id (Kafka's
// replaceGroupInstance). It gets a new member id and keeps its place: its
// assignment, its leadership. In Stable or CompletingRebalance there is no
// rebalance: the answer is the current generation at once, naming the old
// leader id so that a new leader id never makes the member redo an
// assignment the group would not take (as Kafka 2.4). During
// PreparingRebalance it simply joins the rebalance. The old member id is
// fenced from now on; its parked requests get FENCED_INSTANCE_ID.
func (c *Coordinator) replaceStaticMember(now int64, g *Group, m *member, r JoinRequest, w *Waiter) {
	oldID, prevLeader := m.id, g.leader
	m.awaitingJoin.completeJoin(JoinResult{Err: kerr.FencedInstanceID.Code, Generation: -1, MemberID: oldID})
	m.awaitingJoin = nil
	m.awaitingSync.completeSync(SyncResult{Err: kerr.FencedInstanceID.Code})
	m.awaitingSync = nil
	m.id = c.newMemberID(r.InstanceID)
	g.static[r.InstanceID] = m.id
	if g.leader == oldID {
		g.leader = m.id
	}
	m.clientID, m.host = r.ClientID, r.ClientHost
	m.protocols = slices.Clone(r.Protocols)
	m.sessionTimeout, m.rebalanceTimeout = r.SessionTimeout, r.RebalanceTimeout
	m.lastHeartbeat = now
	switch g.state {
	case PreparingRebalance:
		m.awaitingJoin = w
		c.tryCompleteJoin(now, g)
	default: // Stable, CompletingRebalance (a group with members is not Empty)
		w.completeJoin(JoinResult{Generation: g.generation, Protocol: g.protocol, Leader: prevLeader, MemberID: m.id})
	}
}

// Fenced reports FENCED_INSTANCE_ID for a SyncGroup, Heartbeat or
// OffsetCommit carrying instance id inst with a member id that is not the
// one the group holds for it (ErrNone otherwise, and for dynamic members).
func (c *Coordinator) Fenced(groupID, memberID, inst string) int16 {
	if g := c.group(groupID, false); g != nil && g.state != Dead && g.fenced(memberID, inst) {
		return kerr.FencedInstanceID.Code
	}
	return ErrNone
}

func (c *Coordinator) updateMemberAndRebalance(now int64, g *Group, m *member, r JoinRequest, w *Waiter) {
	m.protocols = slices.Clone(r.Protocols)
	m.sessionTimeout, m.rebalanceTimeout = r.SessionTimeout, r.RebalanceTimeout
	m.lastHeartbeat = now
	if m.awaitingJoin != nil && m.awaitingJoin != w {
		// The same member joined again (a retry on another connection):
		// the earlier request is superseded.
		m.awaitingJoin.completeJoin(JoinResult{Err: kerr.RebalanceInProgress.Code, Generation: -1, MemberID: m.id})
	}
	m.awaitingJoin = w
	if g.state != PreparingRebalance {
		c.prepareRebalance(now, g)
	}
	c.tryCompleteJoin(now, g)
}

// prepareRebalance enters PreparingRebalance: parked SyncGroups get
// REBALANCE_IN_PROGRESS, and the join phase ends at the latest after the
// largest rebalance timeout of the members.
func (c *Coordinator) prepareRebalance(now int64, g *Group) {
	if g.state == PreparingRebalance {
		return
	}
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			m.awaitingSync.completeSync(SyncResult{Err: kerr.RebalanceInProgress.Code})
			m.awaitingSync = nil
		}
	}
	var timeout int64
	for _, m := range g.members {
		timeout = max(timeout, m.rebalanceTimeout)
	}
	g.rebalanceEnd = now + timeout
	g.state = PreparingRebalance
}

func (c *Coordinator) tryCompleteJoin(now int64, g *Group) {
	if g.state == PreparingRebalance && g.allJoined() {
		c.completeJoin(now, g)
	}
}

// completeJoin ends the join phase: members that did not rejoin are
// removed, the generation moves on, the protocol is chosen, and every
// parked JoinGroup is answered (the leader gets the member list).
func (c *Coordinator) completeJoin(now int64, g *Group) {
	for _, m := range slices.Clone(g.members) {
		if m.awaitingJoin == nil {
			c.removeMember(g, m)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.leader = "", ""
		g.state = Empty
		return
	}
	g.protocol = g.selectProtocol()
	g.state = CompletingRebalance
	for _, m := range g.members {
		w := m.awaitingJoin
		m.awaitingJoin = nil
		m.lastHeartbeat = now
		w.completeJoin(c.joinResult(g, m))
	}
}

// removeMember drops m; a parked JoinGroup of it gets UNKNOWN_MEMBER_ID.
func (c *Coordinator) removeMember(g *Group, m *member) {
	m.awaitingJoin.completeJoin(JoinResult{Err: kerr.UnknownMemberID.Code, Generation: -1, MemberID: m.id})
	m.awaitingJoin = nil
	m.awaitingSync.completeSync(SyncResult{Err: kerr.UnknownMemberID.Code})
	m.awaitingSync = nil
	g.members = slices.DeleteFunc(g.members, func(o *member) bool { return o == m })
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
		if len(g.members) > 0 {
			g.leader = g.members[0].id
		}
	}
}

// removeMemberAndUpdateGroup: a member left or expired.
func (c *Coordinator) removeMemberAndUpdateGroup(now int64, g *Group, m *member) {
	c.removeMember(g, m)
	switch g.state {
	case Stable, CompletingRebalance:
		c.prepareRebalance(now, g)
		c.tryCompleteJoin(now, g)
	case PreparingRebalance:
		c.tryCompleteJoin(now, g)
	}
}

// Sync handles a SyncGroup.
func (c *Coordinator) Sync(now int64, groupID string, generation int32, memberID string, assignments []Assignment) *Waiter {
	w := newWaiter()
	g := c.group(groupID, false)
	var code int16
	switch {
	case groupID == "":
		code = kerr.InvalidGroupID.Code
	case g == nil:
		code = kerr.UnknownMemberID.Code
	case g.state == Dead:
		code = kerr.CoordinatorNotAvailable.Code
	case !g.has(memberID):
		code = kerr.UnknownMemberID.Code
	case generation != g.generation:
		code = kerr.IllegalGeneration.Code
	case g.state == Empty:
		code = kerr.UnknownMemberID.Code
	case g.state == PreparingRebalance:
		code = kerr.RebalanceInProgress.Code
	}
	if code != ErrNone {
		w.completeSync(SyncResult{Err: code})
		return w
	}
	m := g.member(memberID)
	m.lastHeartbeat = now
	if g.state == Stable {
		w.completeSync(SyncResult{Assignment: m.assignment})
		return w
	}
	// CompletingRebalance: wait for the leader's assignment.
	if m.awaitingSync != nil {
		m.awaitingSync.completeSync(SyncResult{Err: kerr.RebalanceInProgress.Code})
	}
	m.awaitingSync = w
	if memberID == g.leader {
		for _, o := range g.members {
			o.assignment = []byte{}
			for _, a := range assignments {
				if a.MemberID == o.id {
					o.assignment = slices.Clone(a.Assignment)
				}
			}
		}
		g.state = Stable
		for _, o := range g.members {
			o.awaitingSync.completeSync(SyncResult{Assignment: o.assignment})
			o.awaitingSync = nil
			o.lastHeartbeat = now
		}
	}
	return w
}

// Heartbeat handles a Heartbeat.
func (c *Coordinator) Heartbeat(now int64, groupID string, generation int32, memberID string) int16 {
	g := c.group(groupID, false)
	switch {
	case groupID == "":
		return kerr.InvalidGroupID.Code
	case g == nil:
		return kerr.UnknownMemberID.Code
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case g.state == Empty, !g.has(memberID):
		return kerr.UnknownMemberID.Code
	case generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	g.member(memberID).lastHeartbeat = now
	if g.state == PreparingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	// Stable, or CompletingRebalance with the new generation: the member
	// has its JoinGroup answer and is about to sync.
	return ErrNone
}

// Leave handles a LeaveGroup (v0–v2: one member).
func (c *Coordinator) Leave(now int64, groupID, memberID string) int16 {
	g := c.group(groupID, false)
	switch {
	case groupID == "":
		return kerr.InvalidGroupID.Code
	case g == nil:
		return kerr.UnknownMemberID.Code
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case g.isPending(memberID):
		g.removePending(memberID)
		c.tryCompleteJoin(now, g)
		return ErrNone
	}
	m := g.member(memberID)
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	c.removeMemberAndUpdateGroup(now, g, m)
	return ErrNone
}

// LeaveMembers handles a LeaveGroup v3+: each member by member id, or a
// static member by instance id (its member id may be empty), as Kafka 2.4:
// FENCED_INSTANCE_ID when the instance id belongs to another member id,
// UNKNOWN_MEMBER_ID when neither is known. An unknown group answers every
// member UNKNOWN_MEMBER_ID.
func (c *Coordinator) LeaveMembers(now int64, groupID string, ms []LeaveMember) (int16, []int16) {
	g := c.group(groupID, false)
	codes := make([]int16, len(ms))
	switch {
	case groupID == "":
		return kerr.InvalidGroupID.Code, codes
	case g != nil && g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code, codes
	}
	for i, lm := range ms {
		switch {
		case g == nil:
			codes[i] = kerr.UnknownMemberID.Code
		case lm.MemberID != "" && g.fenced(lm.MemberID, lm.InstanceID):
			codes[i] = kerr.FencedInstanceID.Code
		case lm.MemberID != "" && g.isPending(lm.MemberID):
			g.removePending(lm.MemberID)
			c.tryCompleteJoin(now, g)
		default:
			m := g.staticMember(lm.InstanceID)
			if m == nil {
				m = g.member(lm.MemberID)
			}
			if m == nil {
				codes[i] = kerr.UnknownMemberID.Code
				continue
			}
			c.removeMemberAndUpdateGroup(now, g, m)
		}
	}
	return ErrNone, codes
}

// Advance applies the passage of time up to now: pending member ids and
// members not heard from within their session timeout are removed
// (rebalancing their group), join phases past their rebalance deadline
// complete without the members that did not rejoin, and empty groups
// without offsets are forgotten.
func (c *Coordinator) Advance(now int64) {
	for _, g := range c.sortedGroups() {
		for _, id := range slices.Clone(g.pendingOrder) {
			if g.pending[id] <= now {
				g.removePending(id)
				c.tryCompleteJoin(now, g)
			}
		}
		for _, m := range slices.Clone(g.members) {
			if !m.alive(now) && g.has(m.id) {
				c.removeMemberAndUpdateGroup(now, g, m)
			}
		}
		if g.state == PreparingRebalance && now >= g.rebalanceEnd {
			c.completeJoin(now, g)
		}
		if g.state == Empty && len(g.members) == 0 && len(g.pending) == 0 && len(c.offsets[g.id]) == 0 {
			delete(c.groups, g.id)
		}
	}
}

// NextDeadline returns the earliest time at which Advance has something to
// do (0: nothing scheduled).
func (c *Coordinator) NextDeadline() int64 {
	var d int64
	at := func(t int64) {
		if d == 0 || t < d {
			d = t
		}
	}
	for _, g := range c.sortedGroups() {
		for _, exp := range g.pending {
			at(exp)
		}
		for _, m := range g.members {
			if m.awaitingJoin == nil && m.awaitingSync == nil {
				at(m.lastHeartbeat + m.sessionTimeout)
			}
		}
		if g.state == PreparingRebalance {
			at(g.rebalanceEnd)
		}
	}
	return d
}

// Unload drops all membership (this server stopped being the coordinator):
// parked requests get NOT_COORDINATOR, members find the new coordinator and
// rejoin there. Committed offsets stay: they are a replica of the log.
func (c *Coordinator) Unload() {
	for _, g := range c.sortedGroups() {
		for _, m := range g.members {
			m.awaitingJoin.completeJoin(JoinResult{Err: kerr.NotCoordinator.Code, Generation: -1, MemberID: m.id})
			m.awaitingSync.completeSync(SyncResult{Err: kerr.NotCoordinator.Code})
		}
		g.members, g.leader, g.protocol = nil, "", ""
		g.pending, g.pendingOrder, g.static = map[string]int64{}, nil, map[string]string{}
		g.state = Empty
		if len(c.offsets[g.id]) == 0 {
			delete(c.groups, g.id)
		}
	}
}
