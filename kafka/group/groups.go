package group

import "slices"

// A group and its members, and the protocol choice.

// member is one member of a group.
type member struct {
	id               string
	instanceID       string // group.instance.id of a static member (KIP-345), "" if dynamic
	clientID, host   string
	sessionTimeout   int64
	rebalanceTimeout int64
	protocolType     string
	protocols        []Protocol
	assignment       []byte
	lastHeartbeat    int64
	awaitingJoin     *Waiter
	awaitingSync     *Waiter
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func (m *member) matches(ps []Protocol) bool {
	if len(ps) != len(m.protocols) {
		return false
	}
	for i, p := range ps {
		if p.Name != m.protocols[i].Name || string(p.Metadata) != string(m.protocols[i].Metadata) {
			return false
		}
	}
	return true
}

// alive: Kafka's shouldKeepAlive. A member whose JoinGroup or SyncGroup is
// parked is alive (the request itself is its heartbeat); otherwise it must
// have been heard from within its session timeout.
func (m *member) alive(now int64) bool {
	if m.awaitingJoin != nil || m.awaitingSync != nil {
		return true
	}
	return m.lastHeartbeat+m.sessionTimeout > now
}

// Group is one consumer group.
type Group struct {
	id           string
	state        State
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      []*member        // join order
	pending      map[string]int64 // member ids handed out with MEMBER_ID_REQUIRED → expiry
	pendingOrder []string
	rebalanceEnd int64             // PreparingRebalance: when the join phase ends regardless
	static       map[string]string // static members: instance id → member id
}

// staticMember is the member holding instance id inst, or nil.
func (g *Group) staticMember(inst string) *member {
	if inst == "" {
		return nil
	}
	id, ok := g.static[inst]
	if !ok {
		return nil
	}
	return g.member(id)
}

// fenced: Kafka's isStaticMemberFenced: the instance id belongs to a
// static member with another member id (a zombie of a restarted instance,
// or two processes configured with the same instance id).
func (g *Group) fenced(memberID, inst string) bool {
	if inst == "" {
		return false
	}
	id, ok := g.static[inst]
	return ok && id != memberID
}

func (g *Group) member(id string) *member {
	for _, m := range g.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (g *Group) has(id string) bool { return g.member(id) != nil }

func (g *Group) isPending(id string) bool {
	_, ok := g.pending[id]
	return ok
}

func (g *Group) removePending(id string) {
	delete(g.pending, id)
	g.pendingOrder = slices.DeleteFunc(g.pendingOrder, func(s string) bool { return s == id })
}

// candidates are the protocols every member supports, in the first
// member's preference order.
func (g *Group) candidates() []string {
	if len(g.members) == 0 {
		return nil
	}
	var out []string
	for _, p := range g.members[0].protocols {
		all := true
		for _, m := range g.members[1:] {
			if !hasProtocol(m.protocols, p.Name) {
				all = false
				break
			}
		}
		if all && !slices.Contains(out, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

func hasProtocol(ps []Protocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// supports: Kafka's supportsProtocols.
func (g *Group) supports(protocolType string, ps []Protocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(ps) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	cands := g.candidates()
	for _, p := range ps {
		if slices.Contains(cands, p.Name) {
			return true
		}
	}
	return false
}

// selectProtocol: each member votes for its most preferred candidate; the
// most votes win, ties go to the earlier candidate.
func (g *Group) selectProtocol() string {
	cands := g.candidates()
	votes := make([]int, len(cands))
	for _, m := range g.members {
		for _, p := range m.protocols {
			if i := slices.Index(cands, p.Name); i >= 0 {
				votes[i]++
				break
			}
		}
	}
	best := -1
	for i := range cands {
		if best < 0 || votes[i] > votes[best] {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return cands[best]
}

func (g *Group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.awaitingJoin == nil {
			return false
		}
	}
	return true
}
