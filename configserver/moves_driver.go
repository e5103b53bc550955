package configserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// The move driver, on the leader, once a second: each active move looks at
// what the stream's leader last reported (its voters, learners and their
// progress) and either records the step that is now done (a replicated
// command) or asks the leader for the step's change, which the next
// report shows. Every action is safe to repeat, so a new config server
// leader resumes wherever the last one stopped. Draining servers get
// their streams moved away, MaxMoves at a time.

// MoveRequest is POST /v1/moves.
type MoveRequest struct {
	Stream string `json:"stream"`
	From   uint64 `json:"from"`
	To     uint64 `json:"to"` // 0: placed by the config servers
}

// StartMove starts moving a stream's replica; To 0 lets placement choose
// (same DC as From when possible).
func (s *Service) StartMove(ctx context.Context, r MoveRequest) (Move, error) {
	now := time.Now()
	if r.To == 0 {
		st, err := s.state.Stream(r.Stream)
		if err != nil {
			return Move{}, err
		}
		to, err := s.moveTarget(st, r.From, now)
		if err != nil {
			return Move{}, err
		}
		r.To = to
	}
	out, err := s.propose(ctx, Command{Kind: CmdMoveStart, At: now.UnixMilli(), Name: r.Stream, Node: r.From, To: r.To})
	if err == nil {
		err = out.Error()
	}
	if err != nil {
		return Move{}, err
	}
	return s.move(r.Stream), nil
}

// moveTarget places a stream's replica from server from elsewhere: an up,
// active server not already a replica, in from's DC if there is one.
func (s *Service) moveTarget(st *Stream, from uint64, now time.Time) (uint64, error) {
	var dc string
	var cands []Candidate
	for _, c := range s.candidates(now) {
		if c.ID == from {
			dc = c.DC
		}
		if !slices.Contains(st.Replicas, c.ID) && st.FormerReplica(c.ID) == nil {
			cands = append(cands, c)
		}
	}
	for _, srv := range s.state.Servers() {
		if srv.ID == from {
			dc = srv.DC
		}
	}
	if to, err := Place(cands, 1, dc); err == nil {
		return to[0], nil
	}
	to, err := Place(cands, 1, "")
	if err != nil {
		return 0, fmt.Errorf("no server to move %s's replica on %d to: %w", st.Name, from, err)
	}
	return to[0], nil
}

func (s *Service) move(name string) Move {
	for _, m := range s.state.Moves() {
		if m.Stream == name {
			return m
		}
	}
	return Move{}
}

// CancelMove asks for an active move to be undone.
func (s *Service) CancelMove(ctx context.Context, name string) (Move, error) {
	out, err := s.propose(ctx, Command{Kind: CmdMoveCancel, At: time.Now().UnixMilli(), Name: name})
	if err == nil {
		err = out.Error()
	}
	return s.move(name), err
}

// driveMoves advances every active move by what the leaders reported, and
// starts moves off draining servers.
func (s *Service) driveMoves(ctx context.Context, now time.Time) {
	active := 0
	for _, m := range s.state.Moves() {
		if m.State != MoveActive {
			continue
		}
		active++
		if reason := s.driveMove(ctx, m, now); reason != "" {
			s.noteMove(m.Stream, reason)
		}
	}
	s.removeOrphans(ctx)
	s.releaseFormers(ctx, now)
	s.drain(ctx, now, active)
}

// driveMove takes one move one step further; it returns why it waits.
func (s *Service) driveMove(ctx context.Context, m Move, now time.Time) string {
	st, err := s.state.Stream(m.Stream)
	if err != nil {
		return "the stream is gone"
	}
	leader, rep, ok := s.leaderReport(st.Group)
	if !ok {
		return "waiting for a report from the stream's leader"
	}
	a := nextMoveAction(m, rep, leader.ID)
	switch a.kind {
	case actRecord:
		return s.recordStep(ctx, m, a.cmd, a.step, a.reason)
	case actAddLearner:
		return s.memberCall(ctx, http.MethodPost, leader, st.Name, a.node, "")
	case actPromote:
		return s.memberCall(ctx, http.MethodPost, leader, st.Name, a.node, "/promote")
	case actRemove:
		return s.memberCall(ctx, http.MethodDelete, leader, st.Name, a.node, "")
	case actTransfer:
		err := s.transferLeader(ctx, transfer{stream: *st, from: leader.ID, to: a.node, fromServer: leader})
		return fmt.Sprintf("moving the leadership off %d first (%v)", leader.ID, err)
	}
	return a.reason
}

// moveAction is what the driver does next for a move.
type moveAction struct {
	kind      string
	cmd, step string // actRecord: the command and its step
	node      uint64 // the member to add, promote or remove; the new leader
	reason    string
}

// Move actions.
const (
	actRecord     = "record"      // propose cmd (a step done, or the end)
	actAddLearner = "add-learner" // ask the leader to add node as a learner
	actPromote    = "promote"     // ... to promote it
	actRemove     = "remove"      // ... to remove it
	actTransfer   = "transfer"    // ask the leader to hand leadership to node
	actWait       = "wait"        // nothing to do until the next report
)

// nextMoveAction decides a move's next action from what the stream's
// leader (leader) last reported (rep). It is a pure function: the driver
// carries its answer out, the tests check it step by step.
func nextMoveAction(m Move, rep GroupReport, leader uint64) moveAction {
	isMember := func(id uint64) bool { return slices.Contains(rep.Voters, id) || slices.Contains(rep.Learners, id) }
	record := func(cmd, step, reason string) moveAction {
		return moveAction{kind: actRecord, cmd: cmd, step: step, reason: reason}
	}
	// A cancel takes the new replica out, as long as the old one's removal
	// was never asked: before remove-old (a cancel is refused from there
	// on, and no step is recorded on a cancelled move: applyMoveCancel,
	// applyMoveStep). A move cancelled at remove-old by an earlier version
	// finishes, unless one of the two is out already.
	if m.Cancel && (m.Step != StepRemoveOld || !isMember(m.To) || !isMember(m.From)) {
		switch {
		case m.Step == StepRemoveOld && !isMember(m.From):
			return record(CmdMoveEnd, MoveDone, "cancel came too late: the old replica was removed")
		case isMember(m.To):
			return moveAction{kind: actRemove, node: m.To}
		}
		return record(CmdMoveEnd, MoveCancelled, "cancelled at "+m.Step)
	}
	switch m.Step {
	case StepAddLearner:
		if isMember(m.To) {
			return record(CmdMoveStep, StepCatchUp, "")
		}
		return moveAction{kind: actAddLearner, node: m.To}
	case StepCatchUp:
		if slices.Contains(rep.Voters, m.To) {
			return record(CmdMoveStep, StepRemoveOld, "")
		}
		if f, ok := follower(rep, m.To); ok && f.Active && f.Match >= rep.Commit {
			return record(CmdMoveStep, StepPromote, "")
		}
		return moveAction{kind: actWait, reason: "the new replica is catching up"}
	case StepPromote:
		if slices.Contains(rep.Voters, m.To) {
			return record(CmdMoveStep, StepRemoveOld, "")
		}
		return moveAction{kind: actPromote, node: m.To}
	case StepRemoveOld:
		switch {
		case !isMember(m.From):
			return record(CmdMoveEnd, MoveDone, "")
		case leader == m.From:
			return moveAction{kind: actTransfer, node: m.To}
		}
		return moveAction{kind: actRemove, node: m.From}
	}
	return moveAction{kind: actWait, reason: "unknown step " + m.Step}
}

// MoveAction is a move's next action, as the simulator drives it.
type MoveAction struct {
	Kind      string // ActRecord, ActAddLearner, ActPromote, ActRemove, ActTransfer, ActWait
	Cmd, Step string // ActRecord: the command (CmdMoveStep, CmdMoveEnd) and its step
	Node      uint64
	Reason    string
}

// The kinds of MoveAction.
const (
	ActRecord     = actRecord
	ActAddLearner = actAddLearner
	ActPromote    = actPromote
	ActRemove     = actRemove
	ActTransfer   = actTransfer
	ActWait       = actWait
)

// NextMoveAction is nextMoveAction for other packages (the simulator
// drives moves with the config servers' own decisions).
func NextMoveAction(m Move, rep GroupReport, leader uint64) MoveAction {
	a := nextMoveAction(m, rep, leader)
	return MoveAction{Kind: a.kind, Cmd: a.cmd, Step: a.step, Node: a.node, Reason: a.reason}
}

func (s *Service) recordStep(ctx context.Context, m Move, kind, step, reason string) string {
	out, err := s.propose(ctx, Command{Kind: kind, At: time.Now().UnixMilli(), Name: m.Stream, Step: step, Reason: reason})
	if err == nil {
		err = out.Error()
	}
	if err != nil {
		return fmt.Sprintf("recording %s: %v", step, err)
	}
	return ""
}

// memberCall asks the stream's leader for a membership change of node.
func (s *Service) memberCall(ctx context.Context, method string, leader Server, stream string, node uint64, suffix string) string {
	u := fmt.Sprintf("%s://%s/streams/%s/members/%d%s", s.serverScheme(), leader.Admin, url.PathEscape(stream), node, suffix)
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err == nil {
		err = s.do(req)
	}
	if err != nil {
		return fmt.Sprintf("asked the leader (%d): %v", leader.ID, err)
	}
	return "asked the leader; waiting for its report"
}

// leaderReport is the report of a group's leader, with the leader.
func (s *Service) leaderReport(group uint64) (Server, GroupReport, bool) {
	s.soft.mu.Lock()
	l, ok := s.leadersLocked()[group]
	var rep GroupReport
	if ok {
		rep, _ = s.soft.reports[l].group(group)
	}
	s.soft.mu.Unlock()
	if !ok {
		return Server{}, rep, false
	}
	for _, srv := range s.state.Servers() {
		if srv.ID == l {
			return srv, rep, true
		}
	}
	return Server{}, rep, false
}

func follower(rep GroupReport, id uint64) (FollowerReport, bool) {
	for _, f := range rep.Followers {
		if f.ID == id {
			return f, true
		}
	}
	return FollowerReport{}, false
}

// noteMove records why a move waits (soft: shown by GET /v1/moves).
func (s *Service) noteMove(stream, reason string) {
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	if s.soft.moveNotes == nil {
		s.soft.moveNotes = map[string]string{}
	}
	s.soft.moveNotes[stream] = reason
}

// Orphans are the members of a stream's group (as its leader reported
// them) that its catalog does not have: a move's target whose add was
// still in flight when a cancel ended the move (the cancel saw a report
// without it). The driver removes them, one at a time, from streams with
// no active move; the server then removes its copy. Pure, sorted; no
// allocation when there are none (every stream is asked every second).
func Orphans(st Stream, rep GroupReport) []uint64 {
	var out []uint64
	for _, ids := range [][]uint64{rep.Voters, rep.Learners} {
		for _, id := range ids {
			if !slices.Contains(st.Replicas, id) && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// removeOrphans asks the leaders of streams with no active move to remove
// the members their catalog does not have (Orphans). It looks at every
// stream under one hold of the soft state's lock, and asks after it.
func (s *Service) removeOrphans(ctx context.Context) {
	busy := map[string]bool{}
	for _, m := range s.state.Moves() {
		if m.State == MoveActive {
			busy[m.Stream] = true
		}
	}
	type orphan struct {
		stream         string
		leader, member uint64
	}
	var found []orphan
	streams := s.state.Streams()
	s.soft.mu.Lock()
	leaders := s.leadersLocked()
	for i := range streams {
		st := &streams[i]
		if st.State != StreamActive || busy[st.Name] {
			continue
		}
		l, ok := leaders[st.Group]
		if !ok {
			continue
		}
		rep, _ := s.soft.reports[l].group(st.Group)
		if o := Orphans(*st, rep); len(o) > 0 {
			found = append(found, orphan{st.Name, l, o[0]})
		}
	}
	s.soft.mu.Unlock()
	servers := s.state.Servers()
	for _, o := range found {
		i := slices.IndexFunc(servers, func(srv Server) bool { return srv.ID == o.leader })
		if i < 0 {
			continue
		}
		s.log.Info("removing a member the catalog does not have (a cancelled move's target)", "stream", o.stream, "member", o.member)
		s.noteMove(o.stream, s.memberCall(ctx, http.MethodDelete, servers[i], o.stream, o.member, ""))
	}
}

// drain starts moves of the replicas on draining servers, up to MaxMoves
// moves at once.
func (s *Service) drain(ctx context.Context, now time.Time, active int) {
	busy := map[string]bool{}
	for _, m := range s.state.Moves() {
		if m.State == MoveActive {
			busy[m.Stream] = true
		}
	}
	for _, srv := range s.state.Servers() {
		if srv.State != ServerDraining {
			continue
		}
		for _, st := range s.state.Streams() {
			if active >= s.cfg.MaxMoves {
				return
			}
			if st.State != StreamActive || busy[st.Name] || !slices.Contains(st.Replicas, srv.ID) {
				continue
			}
			if _, err := s.StartMove(ctx, MoveRequest{Stream: st.Name, From: srv.ID}); err != nil {
				s.noteMove(st.Name, fmt.Sprintf("draining server %d: %v", srv.ID, err))
				continue
			}
			active++
		}
	}
}
