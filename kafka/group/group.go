// Package group is the Kafka group coordinator as a deterministic state
// machine: group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// session and rebalance timeouts), committed offsets (applied from the
// replicated offsets log), and the read views (DescribeGroups, ListGroups,
// OffsetFetch).
//
// It starts no goroutines, reads no clock and does no IO: time comes in as
// int64 nanoseconds (any monotonic origin), every iteration over groups or
// members is in a defined order (group id, member join order), and member
// ids come from the client id, a nonce given in Config and a counter. It is
// not safe for concurrent use: the owner serialises calls.
//
// The semantics follow Kafka 2.4's GroupCoordinator for the non-static
// (dynamic membership) protocol; see docs/kafka.md, "Consumer groups".
package group

import (
	"slices"
	"strconv"
)

// Kafka error codes returned by the coordinator.
const (
	ErrNone                       int16 = 0
	ErrUnknownTopicOrPartition    int16 = 3
	ErrOffsetMetadataTooLarge     int16 = 12
	ErrCoordinatorNotAvailable    int16 = 15
	ErrNotCoordinator             int16 = 16
	ErrIllegalGeneration          int16 = 22
	ErrInconsistentGroupProtocol  int16 = 23
	ErrInvalidGroupID             int16 = 24
	ErrUnknownMemberID            int16 = 25
	ErrInvalidSessionTimeout      int16 = 26
	ErrRebalanceInProgress        int16 = 27
	ErrInvalidCommitOffsetSize    int16 = 28
	ErrMemberIDRequired           int16 = 79
	ErrGroupMaxSizeReached        int16 = 81
	ErrUnknownServer              int16 = -1
	ErrRequestTimedOut            int16 = 7
	ErrCoordinatorLoadInProgress  int16 = 14
	ErrInvalidTopic               int16 = 17
	ErrGroupAuthorizationRequired int16 = 30
)

// State is a group's state, named as Kafka names it (DescribeGroups).
type State string

// Group states.
const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

// Config tunes the coordinator. Durations are nanoseconds.
type Config struct {
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout (Kafka's group.min/max.session.timeout.ms): outside →
	// INVALID_SESSION_TIMEOUT. Defaults 6s and 30min (Kafka 2.4).
	MinSessionTimeout, MaxSessionTimeout int64
	// MaxMetadataBytes bounds a committed offset's metadata string
	// (offset.metadata.max.bytes): longer → OFFSET_METADATA_TOO_LARGE.
	// Default 4096.
	MaxMetadataBytes int
	// Nonce goes into every member id, so ids stay unique across restarts
	// of the coordinator (the driver passes something like its start time).
	Nonce string
	// MaxMembers bounds the members (and members pending a second join)
	// of one group (Kafka's group.max.size): a join beyond →
	// GROUP_MAX_SIZE_REACHED. Default 1000.
	MaxMembers int
	// MaxGroups bounds the groups with members: a join creating one more
	// → GROUP_MAX_SIZE_REACHED too. Default 10000.
	MaxGroups int
}

func (c Config) withDefaults() Config {
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = 6e9
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = 1800e9
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = 4096
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = 1000
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = 10000
	}
	return c
}

// Protocol is one (name, metadata) pair of a JoinGroup request.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest is a JoinGroup request. Timeouts are nanoseconds.
type JoinRequest struct {
	Group, MemberID      string
	ClientID, ClientHost string
	SessionTimeout       int64
	RebalanceTimeout     int64 // v0: the session timeout
	ProtocolType         string
	Protocols            []Protocol
	RequireKnownMemberID bool // JoinGroup v4+: MEMBER_ID_REQUIRED on the first join
}

// MemberMetadata is one member in the leader's JoinGroup response.
type MemberMetadata struct {
	MemberID string
	Metadata []byte
}

// JoinResult is a JoinGroup response.
type JoinResult struct {
	Err        int16
	Generation int32
	Protocol   string
	Leader     string
	MemberID   string
	Members    []MemberMetadata // the leader only
}

// SyncResult is a SyncGroup response.
type SyncResult struct {
	Err        int16
	Assignment []byte
}

// Assignment is one member's assignment in the leader's SyncGroup.
type Assignment struct {
	MemberID   string
	Assignment []byte
}

// Waiter is a JoinGroup or SyncGroup that may have to wait for the
// rebalance to complete. Ready is closed when its result is set.
type Waiter struct {
	done  bool
	join  JoinResult
	sync  SyncResult
	ready chan struct{}
}

func newWaiter() *Waiter { return &Waiter{ready: make(chan struct{})} }

// Failed returns a done waiter with the given results (errors found before
// the coordinator was asked).
func Failed(j JoinResult, s SyncResult) *Waiter {
	w := &Waiter{done: true, join: j, sync: s, ready: make(chan struct{})}
	close(w.ready)
	return w
}

// Done reports whether the result is there.
func (w *Waiter) Done() bool { return w.done }

// Ready returns a channel closed when the result is there.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Join returns a JoinGroup result (valid once Done).
func (w *Waiter) Join() JoinResult { return w.join }

// Sync returns a SyncGroup result (valid once Done).
func (w *Waiter) Sync() SyncResult { return w.sync }

func (w *Waiter) completeJoin(r JoinResult) {
	if w == nil || w.done {
		return
	}
	w.done, w.join = true, r
	close(w.ready)
}

func (w *Waiter) completeSync(r SyncResult) {
	if w == nil || w.done {
		return
	}
	w.done, w.sync = true, r
	close(w.ready)
}

type member struct {
	id               string
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
	rebalanceEnd int64 // PreparingRebalance: when the join phase ends regardless
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

// OffsetKey names a committed offset.
type OffsetKey struct {
	Group     string
	Topic     string
	Partition int32
}

// Offset is a committed offset.
type Offset struct {
	Offset      int64
	LeaderEpoch int32 // -1 when the committer gave none
	Metadata    string
	CommitTime  int64 // ms, the committer's (v1) or the coordinator's clock
	// LogOffset is where this commit sits in the offsets log: a record is
	// applied only if it is later than what is there, so replaying the log
	// and applying acknowledged commits directly commute.
	LogOffset int64
}

// Coordinator holds every group this server coordinates.
type Coordinator struct {
	cfg     Config
	groups  map[string]*Group
	offsets map[string]map[OffsetKey]Offset // by group
	nextID  uint64
}

// New returns an empty coordinator.
func New(cfg Config) *Coordinator {
	return &Coordinator{cfg: cfg.withDefaults(), groups: map[string]*Group{}, offsets: map[string]map[OffsetKey]Offset{}}
}

// Config returns the coordinator's configuration (defaults filled).
func (c *Coordinator) Config() Config { return c.cfg }

func (c *Coordinator) newMemberID(clientID string) string {
	c.nextID++
	return clientID + "-" + c.cfg.Nonce + "-" + strconv.FormatUint(c.nextID, 10)
}

func (c *Coordinator) sortedGroups() []*Group {
	ids := make([]string, 0, len(c.groups))
	for id := range c.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*Group, len(ids))
	for i, id := range ids {
		out[i] = c.groups[id]
	}
	return out
}

// liveGroups counts the groups with members or members pending.
func (c *Coordinator) liveGroups() int {
	n := 0
	for _, g := range c.groups {
		if len(g.members)+len(g.pending) > 0 {
			n++
		}
	}
	return n
}

func (c *Coordinator) group(id string, create bool) *Group {
	g := c.groups[id]
	if g == nil && create {
		g = &Group{id: id, state: Empty, pending: map[string]int64{}}
		c.groups[id] = g
	}
	return g
}

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
		return fail(ErrInvalidGroupID)
	}
	if r.SessionTimeout < c.cfg.MinSessionTimeout || r.SessionTimeout > c.cfg.MaxSessionTimeout {
		return fail(ErrInvalidSessionTimeout)
	}
	g := c.group(r.Group, false)
	if g == nil {
		if r.MemberID != "" {
			return fail(ErrUnknownMemberID)
		}
		if c.liveGroups() >= c.cfg.MaxGroups {
			return fail(ErrGroupMaxSizeReached)
		}
		g = c.group(r.Group, true)
	}
	if g.state == Dead {
		return fail(ErrCoordinatorNotAvailable)
	}
	if !g.supports(r.ProtocolType, r.Protocols) {
		return fail(ErrInconsistentGroupProtocol)
	}
	if r.MemberID == "" {
		if len(g.members)+len(g.pending) >= c.cfg.MaxMembers {
			return fail(ErrGroupMaxSizeReached)
		}
		id := c.newMemberID(r.ClientID)
		if r.RequireKnownMemberID {
			g.pending[id] = now + r.SessionTimeout
			g.pendingOrder = append(g.pendingOrder, id)
			w.completeJoin(JoinResult{Err: ErrMemberIDRequired, Generation: -1, MemberID: id})
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
	m := g.member(r.MemberID)
	if m == nil {
		return fail(ErrUnknownMemberID)
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
			r.Members = append(r.Members, MemberMetadata{MemberID: o.id, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (c *Coordinator) addMemberAndRebalance(now int64, g *Group, id string, r JoinRequest, w *Waiter) {
	m := &member{
		id: id, clientID: r.ClientID, host: r.ClientHost,
		sessionTimeout: r.SessionTimeout, rebalanceTimeout: r.RebalanceTimeout,
		protocolType: r.ProtocolType, protocols: slices.Clone(r.Protocols),
		lastHeartbeat: now, awaitingJoin: w,
	}
	if len(g.members) == 0 {
		g.protocolType = r.ProtocolType
	}
	g.members = append(g.members, m)
	if g.leader == "" {
		g.leader = id
	}
	c.prepareRebalance(now, g)
	c.tryCompleteJoin(now, g)
}

func (c *Coordinator) updateMemberAndRebalance(now int64, g *Group, m *member, r JoinRequest, w *Waiter) {
	m.protocols = slices.Clone(r.Protocols)
	m.sessionTimeout, m.rebalanceTimeout = r.SessionTimeout, r.RebalanceTimeout
	m.lastHeartbeat = now
	if m.awaitingJoin != nil && m.awaitingJoin != w {
		// The same member joined again (a retry on another connection):
		// the earlier request is superseded.
		m.awaitingJoin.completeJoin(JoinResult{Err: ErrRebalanceInProgress, Generation: -1, MemberID: m.id})
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
			m.awaitingSync.completeSync(SyncResult{Err: ErrRebalanceInProgress})
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
	m.awaitingJoin.completeJoin(JoinResult{Err: ErrUnknownMemberID, Generation: -1, MemberID: m.id})
	m.awaitingJoin = nil
	m.awaitingSync.completeSync(SyncResult{Err: ErrUnknownMemberID})
	m.awaitingSync = nil
	g.members = slices.DeleteFunc(g.members, func(o *member) bool { return o == m })
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
		code = ErrInvalidGroupID
	case g == nil:
		code = ErrUnknownMemberID
	case g.state == Dead:
		code = ErrCoordinatorNotAvailable
	case !g.has(memberID):
		code = ErrUnknownMemberID
	case generation != g.generation:
		code = ErrIllegalGeneration
	case g.state == Empty:
		code = ErrUnknownMemberID
	case g.state == PreparingRebalance:
		code = ErrRebalanceInProgress
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
		m.awaitingSync.completeSync(SyncResult{Err: ErrRebalanceInProgress})
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
		return ErrInvalidGroupID
	case g == nil:
		return ErrUnknownMemberID
	case g.state == Dead:
		return ErrCoordinatorNotAvailable
	case g.state == Empty, !g.has(memberID):
		return ErrUnknownMemberID
	case generation != g.generation:
		return ErrIllegalGeneration
	}
	g.member(memberID).lastHeartbeat = now
	if g.state == PreparingRebalance {
		return ErrRebalanceInProgress
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
		return ErrInvalidGroupID
	case g == nil:
		return ErrUnknownMemberID
	case g.state == Dead:
		return ErrCoordinatorNotAvailable
	case g.isPending(memberID):
		g.removePending(memberID)
		c.tryCompleteJoin(now, g)
		return ErrNone
	}
	m := g.member(memberID)
	if m == nil {
		return ErrUnknownMemberID
	}
	c.removeMemberAndUpdateGroup(now, g, m)
	return ErrNone
}

// CheckCommit validates an OffsetCommit's generation and member (Kafka's
// doCommitOffsets). A commit with generation < 0 to a group without
// members is a simple consumer's and is allowed (the group is created,
// Empty). A valid member's commit counts as a heartbeat.
func (c *Coordinator) CheckCommit(now int64, groupID string, generation int32, memberID string) int16 {
	g := c.group(groupID, false)
	if g == nil {
		if generation >= 0 {
			return ErrIllegalGeneration
		}
		c.group(groupID, true)
		return ErrNone
	}
	switch {
	case g.state == Dead:
		return ErrCoordinatorNotAvailable
	case generation < 0 && g.state == Empty:
		return ErrNone
	case g.state == CompletingRebalance:
		return ErrRebalanceInProgress
	case !g.has(memberID):
		return ErrUnknownMemberID
	case generation != g.generation:
		return ErrIllegalGeneration
	}
	g.member(memberID).lastHeartbeat = now
	return ErrNone
}

// ApplyOffset records a committed offset found at logOffset in the offsets
// log (or acknowledged as written there). Older records than the one held
// are ignored. A nil off deletes the offset.
func (c *Coordinator) ApplyOffset(k OffsetKey, off *Offset, logOffset int64) {
	byKey := c.offsets[k.Group]
	if cur, ok := byKey[k]; ok && cur.LogOffset >= logOffset {
		return
	}
	if off == nil {
		delete(byKey, k)
		return
	}
	if byKey == nil {
		byKey = map[OffsetKey]Offset{}
		c.offsets[k.Group] = byKey
	}
	o := *off
	o.LogOffset = logOffset
	byKey[k] = o
	c.group(k.Group, true) // a group with offsets is listed (Empty)
}

// Offset returns a committed offset.
func (c *Coordinator) Offset(k OffsetKey) (Offset, bool) {
	o, ok := c.offsets[k.Group][k]
	return o, ok
}

// Offsets returns a group's committed offsets sorted by topic and partition.
func (c *Coordinator) Offsets(groupID string) []OffsetEntry {
	var out []OffsetEntry
	for k, o := range c.offsets[groupID] {
		out = append(out, OffsetEntry{OffsetKey: k, Offset: o})
	}
	slices.SortFunc(out, func(a, b OffsetEntry) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Checkpoint returns every committed offset with its log offset, in group,
// topic and partition order (what a compaction checkpoint repeats).
func (c *Coordinator) Checkpoint() []OffsetEntry {
	groups := make([]string, 0, len(c.offsets))
	for id := range c.offsets {
		groups = append(groups, id)
	}
	slices.Sort(groups)
	var out []OffsetEntry
	for _, id := range groups {
		out = append(out, c.Offsets(id)...)
	}
	return out
}

// OffsetCount is the number of committed offsets.
func (c *Coordinator) OffsetCount() int {
	n := 0
	for _, byKey := range c.offsets {
		n += len(byKey)
	}
	return n
}

// OffsetEntry is one committed offset with its key.
type OffsetEntry struct {
	OffsetKey
	Offset
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
			m.awaitingJoin.completeJoin(JoinResult{Err: ErrNotCoordinator, Generation: -1, MemberID: m.id})
			m.awaitingSync.completeSync(SyncResult{Err: ErrNotCoordinator})
		}
		g.members, g.leader, g.protocol = nil, "", ""
		g.pending, g.pendingOrder = map[string]int64{}, nil
		g.state = Empty
		if len(c.offsets[g.id]) == 0 {
			delete(c.groups, g.id)
		}
	}
}

// MemberSummary describes one member (DescribeGroups, admin).
type MemberSummary struct {
	MemberID   string `json:"member_id"`
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
		ms := MemberSummary{MemberID: m.id, ClientID: m.clientID, ClientHost: m.host, LastHeartbeat: m.lastHeartbeat, SessionTimeout: m.sessionTimeout, Metadata: []byte{}, Assignment: []byte{}}
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
