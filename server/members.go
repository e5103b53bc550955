package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// Membership operations on the admin API, one stream (Raft group) at a
// time, each one ConfChangeV2 proposed on the stream's leader (a request to
// another server is redirected there):
//
//	GET    /streams/{name}/members               voters, learners, progress
//	POST   /streams/{name}/members/{id}          add node id as a learner
//	POST   /streams/{name}/members/{id}/promote  make a caught-up learner a voter
//	DELETE /streams/{name}/members/{id}          remove node id
//
// A server is added as a learner (it votes for nothing and counts for no
// quorum while it catches up) and promoted once caught up; a change that
// would leave the group without a reachable quorum is refused, and raft
// itself refuses a change while another is in flight. Replacing a server
// is vdlctl's sequence of these (docs/operations.md).

// MembersStatus is what GET /streams/{name}/members returns.
type MembersStatus struct {
	Stream   string             `json:"stream"`
	Group    uint64             `json:"group"`
	Leader   uint64             `json:"leader"`
	Voters   []uint64           `json:"voters"`
	Learners []uint64           `json:"learners"`
	Commit   uint64             `json:"commit"`
	Replicas map[uint64]Replica `json:"replicas,omitempty"` // the leader's view
}

// Replica is the leader's view of one member.
type Replica struct {
	Role     string `json:"role"` // voter or learner
	Match    uint64 `json:"match"`
	State    string `json:"state"`
	Active   bool   `json:"active"`    // heard from within an election timeout
	CaughtUp bool   `json:"caught_up"` // replicating, within catchUpSlack of the commit index
}

// catchUpSlack is how far behind the commit index a learner may be and
// still count as caught up (it replicates continuously; under load it is
// always a little behind).
const catchUpSlack = 128

// changeTimeout bounds the wait for a membership change to apply.
const changeTimeout = 10 * time.Second

func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	st, gs, ok := s.onLeader(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.membersStatus(st, gs))
}

func (s *Server) membersStatus(st *stream, gs raftnode.GroupStatus) MembersStatus {
	ms := MembersStatus{Stream: st.cfg.Name, Group: st.cfg.ID, Leader: gs.Leader, Voters: gs.Voters,
		Learners: gs.Learners, Commit: gs.Commit, Replicas: map[uint64]Replica{}}
	if ms.Voters == nil {
		ms.Voters = []uint64{}
	}
	if ms.Learners == nil {
		ms.Learners = []uint64{}
	}
	for id, pr := range gs.Progress {
		role := "voter"
		if slices.Contains(gs.Learners, id) {
			role = "learner"
		}
		ms.Replicas[id] = Replica{Role: role, Match: pr.Match, State: pr.State, Active: pr.RecentActive || id == s.cfg.NodeID,
			CaughtUp: CaughtUp(gs, id)}
	}
	return ms
}

func (s *Server) handleAddMember(w http.ResponseWriter, r *http.Request) {
	s.memberChange(w, r, AddLearner)
}

func (s *Server) handlePromoteMember(w http.ResponseWriter, r *http.Request) {
	s.memberChange(w, r, Promote)
}

func (s *Server) handleRemoveMember(w http.ResponseWriter, r *http.Request) {
	s.memberChange(w, r, Remove)
}

func (s *Server) memberChange(w http.ResponseWriter, r *http.Request, c MemberChange) {
	st, gs, ok := s.onLeader(w, r)
	if !ok {
		return
	}
	id, ok := s.memberID(w, r)
	if !ok {
		return
	}
	ps := s.transport.Stats()[id]
	cand, dir := s.peers.candidate(id, ps.Connected, ps.Dir)
	if err := CheckMemberChange(c, gs, st.cfg.Name, cand, s.cfg.NodeID); err != nil {
		jsonError(w, err.Code, "%s", err.Msg)
		return
	}
	t, done := c.ConfChange(), ""
	switch c {
	case AddLearner:
		done = fmt.Sprintf("node %d added to %s as a learner", id, st.cfg.Name)
	case Promote:
		done = fmt.Sprintf("node %d promoted to a voter of %s", id, st.cfg.Name)
	case Remove:
		dir, done = 0, fmt.Sprintf("node %d removed from %s", id, st.cfg.Name)
	}
	s.proposeChange(w, r, st, t, id, dir, done)
}

// MemberChange is one membership operation on a group.
type MemberChange int

// The membership operations.
const (
	AddLearner MemberChange = iota // add a server as a learner
	Promote                        // make a caught-up learner a voter
	Remove                         // remove a voter or learner
)

// ConfChange is the Raft change type of c.
func (c MemberChange) ConfChange() raftpb.ConfChangeType {
	return [...]raftpb.ConfChangeType{raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeAddNode, raftpb.ConfChangeRemoveNode}[c]
}

// ChangeError is a refused membership change; Code is its HTTP status.
type ChangeError struct {
	Code int
	Msg  string
}

func (e *ChangeError) Error() string { return e.Msg }

func refuse(code int, format string, args ...any) *ChangeError {
	return &ChangeError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Candidate is what a group's leader knows of the server a membership
// change is about.
type Candidate struct {
	ID uint64
	// DirKnown: the leader knows its data dir (it connected).
	DirKnown bool
	// Connected: the leader's raft connection to it is up, so the data
	// dir it presents now is the one known (the transport's handshake
	// checked it). A dir known from before, of a server that is down, may
	// be the dir of a disk since replaced.
	Connected bool
	// Stale: it presents another data dir than the one the leader knows
	// (a replaced disk) and the leader has not forgotten the old one yet
	// (it is still a member of another group here): a change now would
	// name the old dir.
	Stale bool
}

// CheckMemberChange decides whether change c of cand may be proposed now
// in a group whose leader (self) reports gs. The admin API and the
// simulator's nemesis both ask it.
func CheckMemberChange(c MemberChange, gs raftnode.GroupStatus, stream string, cand Candidate, self uint64) *ChangeError {
	id := cand.ID
	voter, learner := slices.Contains(gs.Voters, id), slices.Contains(gs.Learners, id)
	switch c {
	case AddLearner:
		switch {
		case voter:
			return refuse(http.StatusConflict, "node %d is already a voter of %s", id, stream)
		case learner:
			return refuse(http.StatusConflict, "node %d is already a learner of %s", id, stream)
		case cand.Stale:
			return refuse(http.StatusConflict, "the leader of %s still knows node %d by its old data dir (it is a member of another stream there): "+
				"remove it from every stream before adding it back (vdlctl member replace %d does), then retry", stream, id, id)
		case !cand.DirKnown || !cand.Connected:
			return refuse(http.StatusConflict, "node %d is not connected to the leader of %s: start it (a new server with an empty data dir "+
				"and initial_cluster_state = \"existing\") and retry", id, stream)
		}
	case Promote:
		if !learner {
			return refuse(http.StatusConflict, "node %d is not a learner of %s", id, stream)
		}
		if !CaughtUp(gs, id) {
			pr := gs.Progress[id]
			return refuse(http.StatusConflict, "node %d is not caught up yet (match %d, commit %d, %s); retry", id, pr.Match, gs.Commit, pr.State)
		}
		if msg := quorumAfter(gs, append(slices.Clone(gs.Voters), id), self); msg != "" {
			return refuse(http.StatusConflict, "promoting node %d %s", id, msg)
		}
	case Remove:
		switch {
		case learner:
		case !voter:
			return refuse(http.StatusNotFound, "node %d is not a member of %s", id, stream)
		case len(gs.Voters) == 1:
			return refuse(http.StatusConflict, "node %d is the last voter of %s", id, stream)
		default:
			rest := slices.DeleteFunc(slices.Clone(gs.Voters), func(v uint64) bool { return v == id })
			if msg := quorumAfter(gs, rest, self); msg != "" {
				return refuse(http.StatusConflict, "removing node %d %s", id, msg)
			}
		}
	}
	return nil
}

// CaughtUp reports whether the leader sees member id replicating within
// catchUpSlack entries of the commit index.
func CaughtUp(gs raftnode.GroupStatus, id uint64) bool {
	pr, ok := gs.Progress[id]
	return ok && pr.State == "StateReplicate" && pr.Match+catchUpSlack >= gs.Commit
}

// proposeChange proposes one membership change and waits for it to apply.
func (s *Server) proposeChange(w http.ResponseWriter, r *http.Request, st *stream, t raftpb.ConfChangeType, id, dir uint64, done string) {
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(id)}}}
	if dir != 0 {
		cc.Context = MemberContext(id, dir, s.peers.memberDirs(st.cfg.ID, s.cfg.NodeID, s.ident.DirID))
	}
	ctx, cancel := context.WithTimeout(r.Context(), changeTimeout)
	defer cancel()
	err := s.host.ProposeConfChange(ctx, st.cfg.ID, cc)
	switch {
	case err == nil:
		s.log.Info("membership change applied", "stream", st.cfg.Name, "change", t.String(), "node", id)
		writeJSON(w, http.StatusOK, map[string]string{"result": done})
	case errors.Is(err, raftnode.ErrConfChangeRejected):
		jsonError(w, http.StatusConflict, "another membership change of %s is in flight; retry when it has applied", st.cfg.Name)
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrOverwritten):
		jsonError(w, http.StatusServiceUnavailable, "leadership of %s moved during the change; retry", st.cfg.Name)
	case errors.Is(err, context.DeadlineExceeded):
		jsonError(w, http.StatusServiceUnavailable, "the change of %s did not apply within %s (is a quorum up?); it may still apply", st.cfg.Name, changeTimeout)
	default:
		jsonError(w, http.StatusServiceUnavailable, "membership change of %s: %v", st.cfg.Name, err)
	}
}

// memberID parses {id} and checks it names a server of the address book.
func (s *Server) memberID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		jsonError(w, http.StatusBadRequest, "member id %q: want a node id", r.PathValue("id"))
		return 0, false
	}
	if _, ok := s.dir.Peer(id); !ok {
		jsonError(w, http.StatusBadRequest, "unknown node %d: it is not in this server's [[peers]] (add it to every server's configuration first)", id)
		return 0, false
	}
	return id, true
}

// onLeader finds a hosted stream and its status on its leader. A request
// to another server is redirected to the leader's admin address (307, so
// the method is kept); with no leader known it is answered 503.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request) (*stream, raftnode.GroupStatus, bool) {
	name := r.PathValue("name")
	st, ok := s.stream(name)
	if !ok {
		if _, known := s.streamConfig(name); known {
			jsonError(w, http.StatusNotFound, "stream %q is not hosted on node %d", name, s.cfg.NodeID)
		} else {
			jsonError(w, http.StatusNotFound, "unknown stream %q", name)
		}
		return nil, raftnode.GroupStatus{}, false
	}
	gs, ok := s.host.Status(st.cfg.ID)
	switch {
	case !ok:
		jsonError(w, http.StatusServiceUnavailable, "stream %q is not running here", name)
	case gs.Leader == s.cfg.NodeID && gs.Role == "StateLeader":
		return st, gs, true
	case gs.Leader == 0:
		jsonError(w, http.StatusServiceUnavailable, "stream %q has no leader right now; retry", name)
	default:
		p, known := s.dir.Peer(gs.Leader)
		if !known || p.Admin == "" {
			jsonError(w, http.StatusMisdirectedRequest, "not the leader of %q; the leader is node %d (no admin address known)", name, gs.Leader)
			break
		}
		u := *r.URL
		u.Scheme, u.Host = "http", p.Admin
		if s.sec.secure() {
			u.Scheme = "https"
		}
		http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
	}
	return nil, raftnode.GroupStatus{}, false
}

// jsonError answers {"error": "..."} with code.
func jsonError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// quorumAfter says why a group whose voters become voters could not reach
// a quorum right now ("" if it could): the leader (self) counts the members
// it heard from within an election timeout.
func quorumAfter(gs raftnode.GroupStatus, voters []uint64, self uint64) string {
	active := 0
	for _, v := range voters {
		if v == self || gs.Progress[v].RecentActive {
			active++
		}
	}
	if need := len(voters)/2 + 1; active < need {
		return fmt.Sprintf("would lose quorum: %d of its %d voters are reachable, %d are needed", active, len(voters), need)
	}
	return ""
}
