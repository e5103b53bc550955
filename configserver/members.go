package configserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

type rfStatus = raftnode.GroupStatus

// The config servers' own membership (docs/configserver.md, "Replacing a
// config server"), etcd's member remove / member add: a config server
// whose data dir was lost is refused by the others (identity.go) until an
// operator removes it from the group (`vdlctl configserver remove N`, a
// Raft conf change). Every config server that applies a membership without
// it forgets the data dir it knew it by and records it as removed; it then
// accepts the new data dir, which — told by them that it was removed —
// joins instead of founding. `vdlctl configserver add N` adds it back as a
// learner; it catches up from a snapshot (statecopy.go), and the leader
// promotes it to a voter once it has every committed entry. One change at
// a time; a removal that would leave the group without a healthy quorum
// is refused. The servers know the config servers by address and keep
// working throughout (a change needs a quorum like any command).

// ConfigServerStatus is one config server as the leader sees it.
type ConfigServerStatus struct {
	ID     uint64 `json:"id"`
	Raft   string `json:"raft"`
	API    string `json:"api"`
	Role   string `json:"role"` // voter, learner, or none (not a member)
	Leader bool   `json:"leader,omitempty"`
	// Health: up, catching up, down, or refused (it presents another data
	// dir than the one the leader knows it by: it lost its data dir).
	Health string `json:"health"`
	Match  uint64 `json:"match"` // the last entry it is known to have
	Note   string `json:"note,omitempty"`
}

// ConfigServers is GET /v1/configservers.
type ConfigServers struct {
	Leader  uint64               `json:"leader"`
	Term    uint64               `json:"term"`
	Commit  uint64               `json:"commit"`
	Members []ConfigServerStatus `json:"members"`
}

// onMembership is told each membership the group applies (or installs):
// a config server no longer in it is forgotten (its data dir) and marked
// removed. Only once this config server applied the removal may a new data
// dir of it be accepted: until then it counts the old one's votes.
func (s *Service) onMembership(g uint64, cs *raftpb.ConfState, _ []byte) {
	if g != group || cs == nil {
		return
	}
	in := map[uint64]bool{}
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range ids {
			in[id] = true
		}
	}
	if len(in) == 0 {
		return
	}
	for _, p := range s.cfg.Peers {
		if p.ID == s.cfg.ID || in[p.ID] {
			continue
		}
		forgot, err := s.peers.forget(p.ID)
		if err != nil {
			s.log.Error("cannot record a config server's removal", "config_server", p.ID, "err", err)
		} else if forgot {
			s.log.Info("config server no longer a member: its data dir forgotten; a new one joins the group", "config_server", p.ID)
		}
	}
}

// forget drops node's data dir and records it removed; false if it was
// already.
func (p *peerDirs) forget(node uint64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, known := p.ids[node]
	if !known && p.removed[node] {
		return false, nil
	}
	p.removed[node] = true
	var removed []uint64
	for id := range p.removed {
		removed = append(removed, id)
	}
	slices.Sort(removed)
	if err := saveJSON(p.dir, removedFile, removed); err != nil {
		return false, err
	}
	delete(p.ids, node)
	delete(p.refused, node)
	return true, p.saveLocked()
}

func (p *peerDirs) wasRemoved(node uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removed[node]
}

func (p *peerDirs) refusedDir(node uint64) (known, presented uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	presented, ok = p.refused[node]
	return p.ids[node], presented, ok
}

// foundingAnswer is GET /internal/founding?id=N on the raft listener.
type foundingAnswer struct {
	Join bool   `json:"join"`
	Why  string `json:"why,omitempty"`
}

func (s *Service) handleFounding(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.URL.Query().Get("id"), 10, 64)
	if err != nil {
		http.Error(w, "want ?id=N", http.StatusBadRequest)
		return
	}
	a := foundingAnswer{}
	if s.peers.wasRemoved(id) {
		a = foundingAnswer{Join: true, Why: fmt.Sprintf("config server %d saw config server %d removed from the group", s.cfg.ID, id)}
	}
	writeJSON(w, http.StatusOK, a)
}

// askFounding asks every other config server whether this one founds the
// group or joins it (it was removed from a running group).
func (s *Service) askFounding() (join bool, why string, err error) {
	for _, p := range s.cfg.Peers {
		if p.ID == s.cfg.ID {
			continue
		}
		resp, err := s.peerGet(s.peerURL(p.ID, "/internal/founding?id="+strconv.FormatUint(s.cfg.ID, 10)))
		if err != nil {
			return false, "", err
		}
		var a foundingAnswer
		switch resp.StatusCode {
		case http.StatusOK:
			err = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&a)
		case http.StatusNotFound: // a config server from before membership changes
		default:
			err = fmt.Errorf("config server %d: %s", p.ID, resp.Status)
		}
		resp.Body.Close()
		if err != nil {
			return false, "", err
		}
		if a.Join {
			return true, a.Why, nil
		}
	}
	return false, "", nil
}

// join starts the group on the empty log: the leader adds this config
// server (vdlctl configserver add) and sends it a snapshot.
func (s *Service) join(why string) error {
	s.ident.Member, s.ident.Joined = true, true
	if err := saveJSON(s.cfg.DataDir, identityFile, s.ident); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	s.log.Warn("joining the config servers' group instead of founding it: waiting to be added (vdlctl configserver add)", "why", why)
	return s.host.AddGroup(group, s.slog)
}

func (s *Service) listConfigServers(context.Context, *http.Request) (int, any, error) {
	st, ok := s.host.Status(group)
	if !ok {
		return 0, nil, ErrNotLeader
	}
	out := ConfigServers{Leader: st.Leader, Term: st.Term, Commit: st.Commit}
	conns := s.tr.Stats()
	for _, p := range s.cfg.Peers {
		m := ConfigServerStatus{ID: p.ID, Raft: p.Raft, API: p.API, Role: "none", Leader: p.ID == st.Leader}
		switch {
		case slices.Contains(st.Voters, p.ID):
			m.Role = "voter"
		case slices.Contains(st.Learners, p.ID):
			m.Role = "learner"
		}
		pr, hasPr := st.Progress[p.ID]
		m.Match = pr.Match
		switch {
		case p.ID == s.cfg.ID:
			m.Health = "up"
		case hasPr && pr.RecentActive && pr.Match >= st.Commit:
			m.Health = "up"
		case hasPr && pr.RecentActive:
			m.Health = "catching up"
		case m.Role == "none" && conns[p.ID].Connected:
			m.Health = "up"
		default:
			m.Health = "down"
		}
		if known, got, refused := s.peers.refusedDir(p.ID); refused && m.Health != "up" {
			m.Health = "refused"
			m.Note = fmt.Sprintf("presents data dir %016x, known with %016x: it lost its data dir; remove it, then add it", got, known)
		}
		if m.Role == "none" {
			m.Note = "not a member: vdlctl configserver add " + strconv.FormatUint(p.ID, 10)
		}
		out.Members = append(out.Members, m)
	}
	return http.StatusOK, out, nil
}

// healthy: the leader heard from it within an election timeout.
func healthy(st rfStatus, id uint64) bool {
	pr, ok := st.Progress[id]
	return ok && pr.RecentActive
}

func (s *Service) memberID(r *http.Request) (uint64, error) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: config server id %q", ErrInvalid, r.PathValue("id"))
	}
	return id, nil
}

// removeConfigServer removes a config server from the group.
func (s *Service) removeConfigServer(ctx context.Context, r *http.Request) (int, any, error) {
	id, err := s.memberID(r)
	if err != nil {
		return 0, nil, err
	}
	s.memberMu.Lock()
	defer s.memberMu.Unlock()
	st, ok := s.host.Status(group)
	if !ok || st.Leader != s.cfg.ID {
		return 0, nil, ErrNotLeader
	}
	refused := func(v uint64) bool { _, _, ok := s.peers.refusedDir(v); return ok }
	if err := checkRemoval(st, s.cfg.ID, id, refused); err != nil {
		return 0, nil, err
	}
	if id == s.cfg.ID {
		to := handOver(st, id, refused)
		if to == 0 {
			return 0, nil, fmt.Errorf("%w: config server %d leads and no other voter is healthy to take over", ErrMembership, id)
		}
		_ = s.host.TransferLeader(group, to)
		return 0, nil, fmt.Errorf("%w: config server %d leads: leadership is handed to config server %d; run the command again", ErrMembership, id, to)
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: &id}}}
	if err := s.changeMembership(ctx, cc, func(st rfStatus) bool {
		return !slices.Contains(st.Voters, id) && !slices.Contains(st.Learners, id)
	}); err != nil {
		return 0, nil, err
	}
	s.log.Info("config server removed from the group", "config_server", id)
	return http.StatusOK, map[string]any{"removed": id}, nil
}

// checkRemoval refuses a removal that leaves no healthy quorum. A member
// whose data dir is refused (it lost it) is not healthy, whatever raft
// says: raft may still count it recently active from before, and what now
// answers at its address cannot vote (CI: a removal that left the leader
// with only such a member beside it was let through).
func checkRemoval(st rfStatus, self, id uint64, refused func(uint64) bool) error {
	isVoter, isLearner := slices.Contains(st.Voters, id), slices.Contains(st.Learners, id)
	switch {
	case !isVoter && !isLearner:
		return fmt.Errorf("%w: config server %d is not a member of the config servers' group", ErrNotFound, id)
	case isLearner:
		return nil // no vote: its removal changes no quorum
	case len(st.Learners) > 0:
		return fmt.Errorf("%w: config server %v is still being added (a learner): one membership change at a time", ErrMembership, st.Learners)
	}
	var rest, up []uint64
	for _, v := range st.Voters {
		if v != id {
			rest = append(rest, v)
			if v == self || healthy(st, v) && !refused(v) {
				up = append(up, v)
			}
		}
	}
	switch {
	case len(rest) == 0:
		return fmt.Errorf("%w: config server %d is the only voter", ErrMembership, id)
	case len(up) == 0:
		return fmt.Errorf("%w: config server %d is the only healthy config server", ErrMembership, id)
	case len(up) < len(rest)/2+1:
		return fmt.Errorf("%w: removing config server %d would leave voters %v of which only %v are healthy: the config servers would lose their quorum; "+
			"bring the others back first", ErrMembership, id, rest, up)
	}
	return nil
}

// handOver picks the healthy voter with the most entries to lead instead
// of id.
func handOver(st rfStatus, id uint64, refused func(uint64) bool) uint64 {
	var to, best uint64
	for _, v := range st.Voters {
		if pr := st.Progress[v]; v != id && healthy(st, v) && !refused(v) && pr.Match >= best {
			to, best = v, pr.Match
		}
	}
	return to
}

// addConfigServer adds a config server of [[peers]] as a learner.
func (s *Service) addConfigServer(ctx context.Context, r *http.Request) (int, any, error) {
	id, err := s.memberID(r)
	if err != nil {
		return 0, nil, err
	}
	if !slices.ContainsFunc(s.cfg.Peers, func(p Peer) bool { return p.ID == id }) {
		return 0, nil, fmt.Errorf("%w: config server %d is not among [[peers]] of config server %d: add it to every config server's configuration first",
			ErrInvalid, id, s.cfg.ID)
	}
	s.memberMu.Lock()
	defer s.memberMu.Unlock()
	st, ok := s.host.Status(group)
	if !ok || st.Leader != s.cfg.ID {
		return 0, nil, ErrNotLeader
	}
	switch {
	case slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id):
		return 0, nil, fmt.Errorf("%w: config server %d is already a member (remove it first if it lost its data dir)", ErrMembership, id)
	case len(st.Learners) > 0:
		return 0, nil, fmt.Errorf("%w: config server %v is still being added (a learner): one membership change at a time", ErrMembership, st.Learners)
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: &id}}}
	if err := s.changeMembership(ctx, cc, func(st rfStatus) bool { return slices.Contains(st.Learners, id) }); err != nil {
		return 0, nil, err
	}
	s.log.Info("config server added to the group as a learner", "config_server", id)
	return http.StatusOK, map[string]any{"added": id, "role": "learner"}, nil
}

// transferLeadership hands the leadership to a voter.
func (s *Service) transferLeadership(_ context.Context, r *http.Request) (int, any, error) {
	id, err := s.memberID(r)
	if err != nil {
		return 0, nil, err
	}
	st, ok := s.host.Status(group)
	if !ok || st.Leader != s.cfg.ID {
		return 0, nil, ErrNotLeader
	}
	if !slices.Contains(st.Voters, id) {
		return 0, nil, fmt.Errorf("%w: config server %d is not a voter", ErrMembership, id)
	}
	if id != s.cfg.ID {
		if err := s.host.TransferLeader(group, id); err != nil {
			return 0, nil, err
		}
	}
	return http.StatusAccepted, map[string]any{"transfer_to": id}, nil
}

// changeMembership proposes a conf change and checks it took effect
// (raft drops one proposed while another is pending).
func (s *Service) changeMembership(ctx context.Context, cc *raftpb.ConfChangeV2, done func(rfStatus) bool) error {
	if err := s.host.ProposeConfChange(ctx, group, cc); err != nil {
		return fmt.Errorf("config servers' membership change: %w", err)
	}
	if st, ok := s.host.Status(group); !ok || !done(st) {
		return fmt.Errorf("%w: the change did not take effect (another membership change was pending): retry", ErrMembership)
	}
	return nil
}

// promoteLearners, on the leader, makes a learner that has every
// committed entry a voter.
func (s *Service) promoteLearners(ctx context.Context) error {
	s.memberMu.Lock()
	defer s.memberMu.Unlock()
	st, ok := s.host.Status(group)
	if !ok || st.Leader != s.cfg.ID {
		return nil
	}
	for _, id := range st.Learners {
		pr, ok := st.Progress[id]
		if !ok || !pr.RecentActive || pr.Match < st.Commit {
			continue
		}
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: &id}}}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.changeMembership(cctx, cc, func(st rfStatus) bool { return slices.Contains(st.Voters, id) })
		cancel()
		if err != nil {
			return fmt.Errorf("promoting config server %d: %w", id, err)
		}
		s.log.Info("config server caught up: promoted to a voter", "config_server", id)
		return nil
	}
	return nil
}

// ErrMembership: a membership change of the config servers is refused.
var ErrMembership = errors.New("config servers' membership")

// Catalog is this config server's state (for tests comparing config
// servers): the servers, the streams, the catalog version and the next
// offset to apply.
func (s *Service) Catalog() (servers []Server, streams []Stream, version, applied int64) {
	return s.state.Servers(), s.state.Streams(), s.state.Version(), s.state.Applied()
}
