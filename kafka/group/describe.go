package group

// The read views: DescribeGroups and ListGroups.

// MemberSummary describes one member (DescribeGroups, admin).
type MemberSummary struct {
	MemberID   string `json:"member_id"`
	InstanceID string `json:"instance_id,omitempty"` // group.instance.id of a static member
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
	Metadata   []byte `json:"-"`
	Assignment []byte `json:"-"`
	// LastHeartbeat is the coordinator-clock time of the last sign of life.
	LastHeartbeat  int64 `json:"-"`
	SessionTimeout int64 `json:"session_timeout_ns"`
}

// Summary describes a group.
type Summary struct {
	Group        string          `json:"group"`
	State        State           `json:"state"`
	Generation   int32           `json:"generation"`
	ProtocolType string          `json:"protocol_type"`
	Protocol     string          `json:"protocol"`
	Leader       string          `json:"leader"`
	Members      []MemberSummary `json:"members"`
}

// Describe returns a group's summary; an unknown group is Dead. As in
// Kafka, the protocol and the members' metadata and assignments are only
// given when the group is Stable.
func (c *Coordinator) Describe(groupID string) Summary {
	g := c.group(groupID, false)
	if g == nil {
		return Summary{Group: groupID, State: Dead, Members: []MemberSummary{}}
	}
	s := Summary{Group: g.id, State: g.state, Generation: g.generation, ProtocolType: g.protocolType, Leader: g.leader, Members: []MemberSummary{}}
	if g.state == Stable {
		s.Protocol = g.protocol
	}
	for _, m := range g.members {
		ms := MemberSummary{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.host, LastHeartbeat: m.lastHeartbeat, SessionTimeout: m.sessionTimeout, Metadata: []byte{}, Assignment: []byte{}}
		if g.state == Stable {
			ms.Metadata, ms.Assignment = m.metadata(g.protocol), m.assignment
		}
		s.Members = append(s.Members, ms)
	}
	return s
}

// List returns every group (id, protocol type), sorted by id.
func (c *Coordinator) List() []Summary {
	var out []Summary
	for _, g := range c.sortedGroups() {
		out = append(out, Summary{Group: g.id, State: g.state, ProtocolType: g.protocolType, Generation: g.generation})
	}
	return out
}
