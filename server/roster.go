package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// Roster is what a server knows of its peers: the data dir id each one
// presented (or that a membership change named), and the membership of the
// groups it hosts. It decides whom to accept at a raft handshake. It is
// deterministic and does no IO: the server keeps it in peers.json (see
// peerDirs), the simulator in memory, both through these methods.
//
//   - A peer not known yet is accepted with the dir it presents, which is
//     recorded first (trust on first contact; founders meet before their
//     groups start, see Server.hostWhenFoundersKnown). Such a record is
//     provisional: a committed membership change naming another dir for
//     that peer (memberContext.Members) replaces it (Applied).
//   - A known peer presenting another dir lost its disk, and with it its
//     votes and acknowledged entries. Until a membership change names its
//     new dir, its answers (votes, acknowledgements) are not heard — they
//     would count as the old server's — and it is told nothing as a
//     follower or a voter — what this server knows of its progress is the
//     old disk's (Hears, Tells). It is still heard as a leader or a
//     candidate, and answered: it can only be one once a quorum that knows
//     its new dir took it back, and a server that missed that change (it
//     was down) learns of it only from the group's leader, perhaps this
//     one.
//   - A membership change adding or promoting a server carries its dir
//     (memberContext): every replica records it when the change applies.
//   - A server that left every group hosted here is forgotten, so it can
//     be added back with a new data dir (a replaced disk): the dir it
//     presented since becomes the known one.
type Roster struct {
	dirs         map[uint64]uint64
	firstContact map[uint64]bool   // dirs recorded at a handshake, not yet named by a change
	presented    map[uint64]uint64 // the other dir a refused peer presented
	members      map[uint64]*raftpb.ConfState
}

// NewRoster returns a roster knowing dirs (node id -> data dir id), those of
// firstContact only as they presented themselves (see FirstContact).
func NewRoster(dirs map[uint64]uint64, firstContact []uint64) *Roster {
	r := &Roster{dirs: maps.Clone(dirs), firstContact: map[uint64]bool{},
		presented: map[uint64]uint64{}, members: map[uint64]*raftpb.ConfState{}}
	if r.dirs == nil {
		r.dirs = map[uint64]uint64{}
	}
	for _, id := range firstContact {
		if _, ok := r.dirs[id]; ok {
			r.firstContact[id] = true
		}
	}
	return r
}

// FirstContact returns the nodes whose known dir is the one they presented
// at a handshake, not yet confirmed by a membership change, sorted: what
// NewRoster takes back.
func (r *Roster) FirstContact() []uint64 {
	return slices.Sorted(maps.Keys(r.firstContact))
}

// errDirChanged: a peer presents another data dir than the one known.
var errDirChanged = errors.New("data dir changed")

// Admit decides on a peer presenting data dir dir: nil to accept it (record
// says dir is new to the roster and was recorded: persist before using it).
func (r *Roster) Admit(node, dir uint64) (record bool, err error) {
	known, ok := r.dirs[node]
	switch {
	case ok && known == dir:
		delete(r.presented, node)
		return false, nil
	case ok:
		r.presented[node] = dir
		return false, fmt.Errorf("%w: node %d presents data dir %016x but this server knows it with data dir %016x: "+
			"it lost its log and votes, and must be replaced through membership changes (vdlctl member replace %d)",
			errDirChanged, node, dir, known, node)
	}
	r.dirs[node] = dir
	r.firstContact[node] = true
	delete(r.presented, node)
	return true, nil
}

// Hears reports whether a message of type t from node is heard: always,
// except from a node that presented another data dir than the one known;
// from that one only the requests of a leader or a candidate, whose effect
// here is this server's own decision (it never counts the node's votes or
// acknowledgements as those of the server it replaced).
func (r *Roster) Hears(node uint64, t raftpb.MessageType) bool {
	return !r.Stale(node) || isRequest(t)
}

// Tells reports whether a message of type t in group is sent to node:
// always, except
//   - to a node that presented another data dir than the one known: to
//     that one only answers to its requests (a leader's or a candidate's);
//   - a request to a node that is not a member of a hosted group: raft
//     computed it from the node's progress before the node left (a
//     heartbeat sent behind a storage write, say), and once it left every
//     group here its old dir is forgotten, so the stale-dir rule above no
//     longer stops it (simulator seed 559 with quiescence: a wiped replica
//     was told its old disk's commit index 2 ms after its removal applied,
//     and panicked).
func (r *Roster) Tells(node, group uint64, t raftpb.MessageType) bool {
	if !isRequest(t) {
		return true
	}
	if cs, hosted := r.members[group]; hosted && known(cs) && !isMember(cs, node) {
		return false
	}
	return !r.Stale(node)
}

// Addressee is the data dir a message to node is meant for, to be checked
// when it goes out on a connection (transport.SendTo): the dir node presented
// if that is another than the one known (only answers to its requests are
// sent to it), else the known one; 0 if node is not known. A message a
// server decides for a peer may wait in the transport's queue while the
// stream is down and go out on the next connection, to whatever process
// answers there: without this the decision (a heartbeat carrying the commit
// index the old disk acknowledged) reached a process that had restarted on
// an empty disk, which fail-stopped ("tocommit(6172) is out of range
// [lastIndex(0)]", campaign dc3_replace). The roster's checks (Tells) are
// only as good as the dir they were made for.
func (r *Roster) Addressee(node uint64) uint64 {
	if p, ok := r.presented[node]; ok && p != r.dirs[node] {
		return p
	}
	return r.dirs[node]
}

// known reports whether cs names any member: a replica that joins with an
// empty log knows its group's membership only once a snapshot brings it.
func known(cs *raftpb.ConfState) bool {
	return len(cs.GetVoters())+len(cs.GetLearners()) > 0
}

// isMember reports whether node is in cs (joint configurations included).
func isMember(cs *raftpb.ConfState, node uint64) bool {
	return slices.Contains(cs.GetVoters(), node) || slices.Contains(cs.GetLearners(), node) ||
		slices.Contains(cs.GetVotersOutgoing(), node) || slices.Contains(cs.GetLearnersNext(), node)
}

// isRequest: a leader's or a candidate's request to a follower or voter.
func isRequest(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgVote, raftpb.MsgPreVote, raftpb.MsgTimeoutNow:
		return true
	}
	return false
}

// Stale reports whether node presented another data dir than the one known
// (it was refused: its disk was replaced). A membership change adding it
// back must wait until this server forgot the old one (it left every group
// here): proposed now, the change would name the old dir.
func (r *Roster) Stale(node uint64) bool {
	d, ok := r.presented[node]
	return ok && d != r.dirs[node]
}

// Candidate is what a leader knows of node for a membership change
// (CheckMemberChange), given its raft stream to node: whether it is up
// (connected) and the data dir node presented at its handshake (conn).
// dir is the data dir a change adding or promoting node names.
//
// A node that left every group here is forgotten while its stream may stay
// up: no handshake records its dir again until the stream breaks. The dir
// it presented on that stream is then the one it has — what a new
// handshake would record first-hand — and the change names it. Before, a
// leader that had forgotten the server it was asked to add back refused it
// as not connected for as long as the stream lived: a move back stalled
// (TestControlledMoveBackAndForth, when the leader hosted no other group
// with that server).
func (r *Roster) Candidate(node uint64, connected bool, conn uint64) (c Candidate, dir uint64) {
	dir, known := r.Dir(node)
	if !known && connected && conn != 0 {
		dir, known = conn, true
	}
	return Candidate{ID: node, DirKnown: known, Stale: r.Stale(node), Connected: connected}, dir
}

// Dir returns node's data dir, if known.
func (r *Roster) Dir(node uint64) (uint64, bool) {
	d, ok := r.dirs[node]
	return d, ok
}

// Dirs returns a copy of the known data dirs.
func (r *Roster) Dirs() map[uint64]uint64 {
	out := make(map[uint64]uint64, len(r.dirs))
	for k, v := range r.dirs {
		out[k] = v
	}
	return out
}

// Hosted records the membership of a group this server starts hosting.
func (r *Roster) Hosted(group uint64, cs *raftpb.ConfState) { r.members[group] = cs }

// Members returns a hosted group's voters and learners.
func (r *Roster) Members(group uint64) (voters, learners []uint64, ok bool) {
	cs, ok := r.members[group]
	if !ok {
		return nil, nil, false
	}
	return slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners()), true
}

// Applied records a membership change a hosted group applied, with the
// change's context; self is this server's id. It reports whether the known
// dirs changed (persist them).
func (r *Roster) Applied(self, group uint64, cs *raftpb.ConfState, context []byte) (changed bool) {
	before := r.everyone()
	r.members[group] = cs
	after := r.everyone()
	for _, id := range before {
		if !slices.Contains(after, id) && id != self {
			// Forgotten: the dir it presents on its connection, if it came
			// back with another one, is the one known from now on (as a
			// handshake would record it first-hand; the connection stays up).
			if p, ok := r.presented[id]; ok {
				r.dirs[id] = p
				r.firstContact[id] = true
				changed = true
			} else if _, ok := r.dirs[id]; ok {
				delete(r.dirs, id)
				delete(r.firstContact, id)
				changed = true
			}
			delete(r.presented, id)
		}
	}
	// A context names the node a change added or promoted, a member of
	// the membership it comes with (a snapshot install replays the
	// contexts of every change it jumped over: only its members' count).
	var mc memberContext
	if len(context) == 0 || json.Unmarshal(context, &mc) != nil {
		return changed
	}
	if mc.Node != 0 && mc.Node != self && mc.DirID != 0 &&
		(slices.Contains(cs.GetVoters(), mc.Node) || slices.Contains(cs.GetLearners(), mc.Node)) {
		if r.dirs[mc.Node] != mc.DirID || r.firstContact[mc.Node] {
			r.dirs[mc.Node] = mc.DirID
			delete(r.firstContact, mc.Node)
			changed = true
		}
		if r.presented[mc.Node] == mc.DirID {
			delete(r.presented, mc.Node)
		}
	}
	// The other members' dirs as the proposing leader knew them: a server
	// whose roster knows none of them (its own disk was replaced: it
	// starts with an empty roster) learns them from the quorum's log with
	// its own addition, instead of trusting whatever each presents when it
	// first meets it — which, for a peer wiped since, is an empty disk
	// whose votes then counted as the old one's (simulator seed 5329:
	// n3, replaced, could not reach n2 until n2's disk was replaced too,
	// took its new dir at first contact, and won an election with its
	// vote, losing acknowledged writes). A dir it took at first contact
	// before the change applied gives way the same: the change is the
	// quorum's word, the handshake only the peer's; the peer, if it
	// presented another dir, is then refused as a replaced one (Stale).
	// A dir known from a change stays: later changes keep it.
	for _, id := range slices.Sorted(maps.Keys(mc.Members)) {
		d := mc.Members[id]
		if id == self || d == 0 || !isMember(cs, id) {
			continue
		}
		if known, ok := r.dirs[id]; ok && !r.firstContact[id] {
			continue
		} else if ok && known != d {
			r.presented[id] = known
		}
		r.dirs[id] = d
		delete(r.firstContact, id)
		changed = true
	}
	return changed
}

// MemberDirs is the known data dir of each member of a hosted group, with
// this server's own (self, dir): what a change adding a server tells it
// (memberContext.Members).
func (r *Roster) MemberDirs(group, self, dir uint64) map[uint64]uint64 {
	out := map[uint64]uint64{self: dir}
	cs := r.members[group]
	for _, id := range append(slices.Clone(cs.GetVoters()), cs.GetLearners()...) {
		if d, ok := r.dirs[id]; ok {
			out[id] = d
		}
	}
	return out
}

// everyone is every voter and learner of the hosted groups, sorted.
func (r *Roster) everyone() []uint64 {
	var ids []uint64
	for _, cs := range r.members {
		for _, id := range append(slices.Clone(cs.GetVoters()), cs.GetLearners()...) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// memberContext is what a membership change adding or promoting a server
// carries: its data dir, so every replica knows it before it can vote,
// and the other members' dirs, so that it knows theirs (Applied).
type memberContext struct {
	Node    uint64            `json:"node"`
	DirID   uint64            `json:"dir_id"`
	Members map[uint64]uint64 `json:"members,omitempty"`
}

// MemberContext is the context of a change adding or promoting node with
// data dir dir in a group whose members have the dirs members (the
// proposing leader's own included).
func MemberContext(node, dir uint64, members map[uint64]uint64) []byte {
	b, _ := json.Marshal(memberContext{Node: node, DirID: dir, Members: members})
	return b
}
