package configserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/vdl-project/vdl/raftnode"
)

// Report is what a server tells the config servers every few seconds.
type Report struct {
	Server Server        `json:"server"` // its identity and addresses (state and registered are ignored)
	Groups []GroupReport `json:"groups"`
	// DiskFreeBytes is the free space of its data dir; SyncP99Ms its
	// fsync latency (p99 of the last minute; 0 if unknown).
	DiskFreeBytes int64   `json:"disk_free_bytes"`
	SyncP99Ms     float64 `json:"sync_p99_ms"`
	// DiskLow: its data dir is short of space (its space reserve is given
	// up): it refuses produces and new streams, and is placed none.
	DiskLow bool `json:"disk_low,omitempty"`
	// Version is the catalog version it has; the answer carries the
	// streams only when they changed since.
	Version int64 `json:"version"`
	// Seq numbers the server process's reports from 1 (0: an older server,
	// which always reports in full). Base, when not 0, makes this a delta
	// of the answered report Base: Groups holds only the groups whose
	// report changed since, Gone the groups no longer hosted (delta.go).
	Seq  uint64   `json:"seq,omitempty"`
	Base uint64   `json:"base,omitempty"`
	Gone []uint64 `json:"gone,omitempty"`
	// LeadersGen is the generation of the stream leaders the server holds
	// from an earlier answer (0: none).
	LeadersGen uint64 `json:"leaders_gen,omitempty"`
}

// GroupReport is one hosted group's replication state.
type GroupReport struct {
	Group   uint64 `json:"group"`
	Role    string `json:"role"` // raft's: StateLeader, StateFollower, ...
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Lag is, on a leader, how many entries its slowest voter is behind;
	// Followers is, on a leader, each other replica's progress.
	Lag       uint64           `json:"lag"`
	Followers []FollowerReport `json:"followers,omitempty"`
	// HighWatermark is the stream's next offset as this replica applied
	// it: on a leader, what tells the balancer the stream is written
	// (its commit also moves with every election).
	HighWatermark int64 `json:"hwm,omitempty"`
	// Voters and Learners are the group's membership as this replica
	// applied it.
	Voters   []uint64 `json:"voters,omitempty"`
	Learners []uint64 `json:"learners,omitempty"`
}

// ReportGroup is server self's report of one group it hosts, from the
// group's status: the servers' reports and the simulator's are this.
func ReportGroup(self uint64, gs raftnode.GroupStatus) GroupReport {
	gr := GroupReport{Group: gs.Group, Role: gs.Role, Leader: gs.Leader, Term: gs.Term, Commit: gs.Commit, Applied: gs.Applied,
		HighWatermark: gs.HighWatermark, Voters: gs.Voters, Learners: gs.Learners}
	for _, id := range slices.Sorted(maps.Keys(gs.Progress)) {
		p := gs.Progress[id]
		if gs.Commit > p.Match {
			gr.Lag = max(gr.Lag, gs.Commit-p.Match)
		}
		if id != self {
			gr.Followers = append(gr.Followers, FollowerReport{ID: id, Match: p.Match, Active: p.RecentActive})
		}
	}
	return gr
}

// FollowerReport is a replica's progress as its leader sees it.
type FollowerReport struct {
	ID     uint64 `json:"id"`
	Match  uint64 `json:"match"`  // the last entry it is known to have
	Active bool   `json:"active"` // heard from within an election timeout
}

// Assignment is the answer to a report: what the server hosts.
type Assignment struct {
	Version int64    `json:"version"`
	Servers []Server `json:"servers"`
	// Streams is every active stream (nil when unchanged since the
	// report's version); a server hosts those naming it among replicas.
	Streams []Stream `json:"streams,omitempty"`
	// Deleted are groups of deleted streams whose replicas include the
	// server: it stops them and removes their data.
	Deleted []uint64 `json:"deleted,omitempty"`
	// Leaders is each stream's leader as the replicas report it; nil when
	// the report's LeadersGen and Version say the server holds it already.
	// LeadersGen names it (0: from a config server that does not name it).
	Leaders    map[string]uint64 `json:"leaders"` // null and {} differ
	LeadersGen uint64            `json:"leaders_gen,omitempty"`
	// NeedFull answers a delta report whose base this config server does
	// not hold: nothing else in the answer counts, and the server reports
	// in full at once.
	NeedFull bool `json:"need_full,omitempty"`
}

// ServerStatus is a server as the config servers' leader sees it.
type ServerStatus struct {
	Server
	// Health is "up", "down" (not heard from for down_after_ms), or
	// "unknown" (this leader has not led long enough to say).
	Health        string  `json:"health"`
	LastReportMs  int64   `json:"last_report_ms_ago"` // -1: never, for this leader
	Groups        int     `json:"groups"`
	Leaders       int     `json:"leaders"`
	DiskFreeBytes int64   `json:"disk_free_bytes"`
	SyncP99Ms     float64 `json:"sync_p99_ms"`
	DiskLow       bool    `json:"disk_low,omitempty"`
}

// softState is the leader's memory of reports: never replicated, rebuilt
// from scratch by a new leader (which says its view is stale until it has
// led for down_after_ms).
type softState struct {
	mu          sync.Mutex
	leaderSince time.Time // zero: not the leader
	term        uint64    // the term this server leads in
	reports     map[uint64]heard
	// leaders is each group's reported leader, derived from reports when
	// asked after one arrived (nil: not derived yet); shared, read-only.
	// Every report, move step and orphan check asks: derived per ask, it
	// made them quadratic in the streams (10,000 streams took servers
	// down: their reports were answered too late).
	leaders   map[uint64]uint64
	moveNotes map[string]string // stream -> why its move waits
	// leadersGen names the leaders derived last (term<<32 | a count of
	// the changes in this term), prevLeaders the map it names: an answer
	// leaves the leaders out when the server holds this generation.
	leadersGen  uint64
	prevLeaders map[uint64]uint64
}

// heard is a server's latest report, with its groups indexed.
type heard struct {
	at     time.Time
	report Report
	groups map[uint64]int // group -> index in report.Groups
}

func newHeard(at time.Time, r Report) heard {
	h := heard{at: at, report: r, groups: make(map[uint64]int, len(r.Groups))}
	for i, g := range r.Groups {
		h.groups[g.Group] = i
	}
	return h
}

// group is what the report says of group.
func (h heard) group(group uint64) (GroupReport, bool) {
	i, ok := h.groups[group]
	if !ok {
		return GroupReport{}, false
	}
	return h.report.Groups[i], true
}

// setReport keeps a server's latest report r. A server with hot streams
// reports new offsets every time, and its report holds every group it
// hosts (10,000 at scale): the groups' index is kept when r lists the
// same groups in the same order, and the leaders derived from all
// reports are derived again only when r tells of another leadership
// (leadersLocked: rebuilt at every such report, they were the largest
// cost of the leader's report handling beside 10,000 idle streams).
func (s *softState) setReport(id uint64, at time.Time, r Report) {
	prev, ok := s.reports[id]
	if !ok || !sameGroupIDs(prev.report.Groups, r.Groups) {
		s.reports[id] = newHeard(at, r)
		s.leaders = nil
		return
	}
	s.reports[id] = heard{at: at, report: r, groups: prev.groups}
	if !slices.EqualFunc(prev.report.Groups, r.Groups, sameLeadership) {
		s.leaders = nil
	}
}

// sameGroupIDs reports whether a and b list the same groups in order.
func sameGroupIDs(a, b []GroupReport) bool {
	return slices.EqualFunc(a, b, func(x, y GroupReport) bool { return x.Group == y.Group })
}

// sameLeadership reports whether a and b say the same of a group's
// leadership: all leadersLocked reads.
func sameLeadership(a, b GroupReport) bool {
	return a.Group == b.Group && a.Role == b.Role && a.Leader == b.Leader && a.Term == b.Term
}

func newSoftState() *softState { return &softState{reports: map[uint64]heard{}} }

// health of server id at now.
func (s *softState) health(id uint64, now time.Time, downAfter time.Duration) (string, *heard) {
	h, ok := s.reports[id]
	switch {
	case ok && now.Sub(h.at) <= downAfter:
		return "up", &h
	case s.leaderSince.IsZero() || now.Sub(s.leaderSince) < downAfter:
		if ok {
			return "unknown", &h
		}
		return "unknown", nil
	case ok:
		return "down", &h
	}
	return "down", nil
}

// fresh reports whether the leader has led long enough to call a server
// down, and if not, why.
func (s *softState) fresh(now time.Time, downAfter time.Duration) (bool, string) {
	if s.leaderSince.IsZero() {
		return false, "not the leader"
	}
	if led := now.Sub(s.leaderSince); led < downAfter {
		return false, fmt.Sprintf("stale view: this config server has led for %v, servers not heard from within %v are unknown, not down",
			led.Round(time.Millisecond), downAfter)
	}
	return true, ""
}

func (s *Service) downAfter() time.Duration {
	return time.Duration(s.cfg.DownAfterMs) * time.Millisecond
}

// serverStatuses is every registered server with its health.
func (s *Service) serverStatuses(now time.Time) []ServerStatus {
	servers := s.state.Servers()
	leaders := map[uint64]int{}
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	for _, st := range s.leadersLocked() {
		leaders[st]++
	}
	out := make([]ServerStatus, 0, len(servers))
	for _, srv := range servers {
		health, h := s.soft.health(srv.ID, now, s.downAfter())
		ss := ServerStatus{Server: srv, Health: health, LastReportMs: -1, Leaders: leaders[srv.ID]}
		if h != nil {
			ss.LastReportMs = now.Sub(h.at).Milliseconds()
			ss.Groups = len(h.report.Groups)
			ss.DiskFreeBytes, ss.SyncP99Ms, ss.DiskLow = h.report.DiskFreeBytes, h.report.SyncP99Ms, h.report.DiskLow
		}
		out = append(out, ss)
	}
	return out
}

// leadersLocked is each group's leader as reported: by the replica
// reporting itself leader at the highest term. The map is shared: read it,
// never change it.
func (s *Service) leadersLocked() map[uint64]uint64 {
	if s.soft.leaders != nil {
		return s.soft.leaders
	}
	best := map[uint64]GroupReport{}
	for _, h := range s.soft.reports {
		for _, g := range h.report.Groups {
			if b, ok := best[g.Group]; (!ok || g.Term > b.Term) && g.Role == roleLeader {
				best[g.Group] = g
			}
		}
	}
	out := make(map[uint64]uint64, len(best))
	for g, r := range best {
		out[g] = r.Leader
	}
	if !maps.Equal(out, s.soft.prevLeaders) {
		n := uint64(1)
		if s.soft.leadersGen>>32 == s.soft.term {
			n = s.soft.leadersGen&(1<<32-1) + 1
		}
		s.soft.leadersGen = s.soft.term<<32 | n
	}
	s.soft.leaders, s.soft.prevLeaders = out, out
	return out
}

// roleLeader is the role a leader reports (raft.StateLeader.String()).
const roleLeader = "StateLeader"

// handleReport registers or updates the server if needed and returns its
// assignment.
func (s *Service) handleReport(ctx context.Context, r Report) (Assignment, error) {
	if r.Server.ID == 0 {
		return Assignment{}, fmt.Errorf("%w: a report needs the server's id", ErrInvalid)
	}
	if err := s.readBarrier(ctx); err != nil {
		return Assignment{}, err
	}
	if !s.noteLeadership() {
		return Assignment{}, ErrNotLeader
	}
	if err := s.register(ctx, r.Server); err != nil {
		return Assignment{}, err
	}
	now := time.Now()
	s.soft.mu.Lock()
	var prev *Report
	if h, ok := s.soft.reports[r.Server.ID]; ok {
		prev = &h.report
	}
	same := r.Base != 0 && len(r.Groups) == 0 && len(r.Gone) == 0 // a delta of nothing
	r, ok := mergeReport(prev, r)
	if !ok {
		s.soft.mu.Unlock()
		return Assignment{NeedFull: true}, nil
	}
	if !same && (prev == nil || !slices.EqualFunc(prev.Groups, r.Groups, sameGroupReport)) {
		s.soft.setReport(r.Server.ID, now, r)
	} else {
		s.soft.reports[r.Server.ID] = heard{at: now, report: r, groups: s.soft.reports[r.Server.ID].groups}
	}
	leaders := s.leadersLocked()
	gen := s.soft.leadersGen
	// The leader's view of the groups the server reports but is no
	// replica of (orphans asks only of those).
	all, byGroup := s.state.streamsByGroup()
	views := map[uint64]GroupReport{}
	for _, g := range r.Groups {
		if i, ok := byGroup[g.Group]; ok && (all[i].State != StreamActive || slices.Contains(all[i].Replicas, r.Server.ID)) {
			continue
		}
		if l, ok := leaders[g.Group]; ok {
			if gr, ok := s.soft.reports[l].group(g.Group); ok {
				views[g.Group] = gr
			}
		}
	}
	s.soft.mu.Unlock()

	a := Assignment{Version: s.state.Version(), Servers: s.state.Servers(), LeadersGen: gen}
	if gen == 0 || r.LeadersGen != gen || r.Version != a.Version {
		a.Leaders = map[string]uint64{}
	}
	a.Deleted = orphans(r.Server.ID, r.Groups, all, byGroup, s.state.NextGroup(), func(g uint64) (GroupReport, bool) {
		v, ok := views[g]
		return v, ok && leaders[g] != r.Server.ID
	})
	for _, st := range all {
		if st.State == StreamDeleting {
			if slices.Contains(st.Replicas, r.Server.ID) {
				a.Deleted = append(a.Deleted, st.Group)
			}
			continue
		}
		if l, ok := leaders[st.Group]; ok && a.Leaders != nil {
			a.Leaders[st.Name] = l
		}
		if a.Version != r.Version {
			a.Streams = append(a.Streams, st)
		}
	}
	fpBeforeReportAnswer()
	return a, nil
}

// orphans are the reported groups the server must remove: of streams that
// were purged (a replica down through the whole deletion), and of active
// streams it is no longer a replica of (a move took it off, or a cancelled
// move took it back out) once the group's leader reports a membership
// without it. (A removed replica may never hear of its removal: the
// leader's view decides.)
// byGroup indexes streams by group (the first stream of each).
func orphans(server uint64, groups []GroupReport, streams []Stream, byGroup map[uint64]int, next uint64, leaderView func(group uint64) (GroupReport, bool)) []uint64 {
	var out []uint64
	for _, g := range groups {
		i, ok := byGroup[g.Group]
		if !ok {
			i = -1
		}
		switch {
		case i >= 0 && streams[i].State == StreamActive && !slices.Contains(streams[i].Replicas, server):
			if l, ok := leaderView(g.Group); ok && !slices.Contains(l.Voters, server) && !slices.Contains(l.Learners, server) {
				out = append(out, g.Group)
			}
		case i < 0 && g.Group != OffsetsGroup && g.Group < next:
			out = append(out, g.Group)
		}
	}
	return out
}

// register proposes the server's registration when it is new or changed.
func (s *Service) register(ctx context.Context, srv Server) error {
	for _, known := range s.state.Servers() {
		if known.ID == srv.ID {
			srv.State, srv.Registered = known.State, known.Registered
			if known == srv {
				return nil
			}
		}
	}
	out, err := s.propose(ctx, Command{Kind: CmdRegister, At: time.Now().UnixMilli(), Server: &srv})
	if err != nil {
		return err
	}
	return out.Error()
}

// runLeaderDuties tracks leadership (the soft state restarts with each
// term of this server's) and, on the leader, creates the offsets stream
// once three servers registered and purges deleted streams every replica
// stopped.
func (s *Service) runLeaderDuties() {
	defer s.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var lastBalance time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		leading := s.noteLeadership()
		if leading {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			if err := errors.Join(s.ensureOffsetsStream(ctx), s.purgeStopped(ctx), s.compact(ctx), s.promoteLearners(ctx)); err != nil && s.ctx.Err() == nil {
				s.log.Warn("config server duties", "err", err)
			}
			if now := time.Now(); now.Sub(lastBalance) >= time.Second {
				lastBalance = now
				s.balance(ctx, now)
				s.driveMoves(ctx, now)
			}
			cancel()
		}
	}
}

// noteLeadership restarts the soft state when this server starts leading
// (in a new term: reports heard in an earlier term may be stale) and
// reports whether it leads.
func (s *Service) noteLeadership() bool {
	st, ok := s.host.Status(group)
	leading := ok && s.isLeader()
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	switch {
	case leading && (s.soft.leaderSince.IsZero() || s.soft.term != st.Term):
		s.soft.leaderSince, s.soft.term = time.Now(), st.Term
		s.soft.reports, s.soft.leaders, s.soft.prevLeaders, s.soft.leadersGen = map[uint64]heard{}, nil, nil, 0
		s.log.Info("leading the config servers", "term", st.Term)
	case !leading:
		s.soft.leaderSince = time.Time{}
	}
	return leading
}

// ensureOffsetsStream creates __consumer_offsets on three servers that are
// up, once there are three.
func (s *Service) ensureOffsetsStream(ctx context.Context) error {
	for _, st := range s.state.Streams() {
		if st.Name == OffsetsStream {
			return nil
		}
	}
	replicas, err := Place(s.candidates(time.Now()), 3, "")
	if err != nil {
		return nil // not three servers up yet
	}
	spec := &StreamSpec{Name: OffsetsStream, ReplicationFactor: 3, RetentionMs: new(int64(-1)), RetentionBytes: new(int64(-1))}
	out, err := s.propose(ctx, Command{Kind: CmdCreate, At: time.Now().UnixMilli(), Spec: spec, Replicas: replicas})
	if err == nil && !errors.Is(out.Error(), ErrExists) {
		err = out.Error()
	}
	return err
}

// purgeStopped forgets deleted streams that every replica, heard from
// since this leader leads, no longer hosts.
func (s *Service) purgeStopped(ctx context.Context) error {
	now := time.Now()
	var errs []error
	for _, st := range s.state.Streams() {
		if st.State != StreamDeleting || !s.stoppedEverywhere(st, now) {
			continue
		}
		out, err := s.propose(ctx, Command{Kind: CmdPurge, At: now.UnixMilli(), Name: st.Name, Node: st.Group})
		errs = append(errs, err, out.Error())
	}
	return errors.Join(errs...)
}

func (s *Service) stoppedEverywhere(st Stream, now time.Time) bool {
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	for _, id := range st.Replicas {
		health, h := s.soft.health(id, now, s.downAfter())
		if health != "up" {
			return false
		}
		if slices.ContainsFunc(h.report.Groups, func(g GroupReport) bool { return g.Group == st.Group }) {
			return false
		}
	}
	return true
}

// candidates are the registered servers that are up, with their load and
// whether their last report said their disk is short of space.
func (s *Service) candidates(now time.Time) []Candidate {
	var up []Server
	low := map[uint64]bool{}
	s.soft.mu.Lock()
	for _, srv := range s.state.Servers() {
		if health, h := s.soft.health(srv.ID, now, s.downAfter()); health == "up" {
			up = append(up, srv)
			low[srv.ID] = h.report.DiskLow
		}
	}
	s.soft.mu.Unlock()
	cands := Load(up, s.state.Streams())
	for i := range cands {
		cands[i].DiskLow = low[cands[i].ID]
	}
	return cands
}
