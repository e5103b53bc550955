package group

// The coordinator's requests and results, and the waiter that parks a
// JoinGroup or SyncGroup until its result is there.

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
	// InstanceID is the member's group.instance.id (JoinGroup v5+, KIP-345):
	// a static member. "" is a dynamic member.
	InstanceID string
}

// MemberMetadata is one member in the leader's JoinGroup response.
type MemberMetadata struct {
	MemberID   string
	InstanceID string // "" for a dynamic member
	Metadata   []byte
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

// LeaveMember is one member of a LeaveGroup v3+ (by member id, or by
// instance id alone for a static member).
type LeaveMember struct {
	MemberID, InstanceID string
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
