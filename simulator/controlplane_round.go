package simulator

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/server"
)

// The control plane's config server leader (controlplane.go): each round
// it collects the servers' reports, assigns streams, drives moves, runs
// the balancer and purges tombstones.

// reachable: the node reports to the config servers (a node cut off from
// its clients is cut off from them too).
func (c *controlPlane) reachable(n *node) bool {
	return !n.down && !n.paused && !n.quarantined && n.rn != nil && c.s.clientCut[n.id] == 0
}

// candidates are the servers placement may choose: heard from in this
// leader's term within down_after.
func (c *controlPlane) candidates() []configserver.Candidate {
	var servers []configserver.Server
	low := map[uint64]bool{}
	for _, n := range c.s.nodes {
		if t, ok := c.heard[n.id]; ok && c.s.w.now-t < int64(cpDownAfter) {
			servers = append(servers, c.server(n))
			low[n.id] = n.space != nil && n.space.Low() // its report's disk_low
		}
	}
	cands := configserver.Load(servers, c.allStreams())
	for i := range cands {
		cands[i].DiskLow = low[cands[i].ID]
	}
	return cands
}

func (c *controlPlane) server(n *node) configserver.Server {
	return configserver.Server{ID: n.id, DC: fmt.Sprintf("dc%d", n.dc), DirID: n.dirID, State: configserver.ServerActive}
}

// allStreams is the active streams then the tombstones, in order.
func (c *controlPlane) allStreams() []configserver.Stream {
	var out []configserver.Stream
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		out = append(out, *c.streams[name])
	}
	for _, g := range slices.Sorted(maps.Keys(c.tombs)) {
		out = append(out, *c.tombs[g])
	}
	return out
}

// round is the config server leader's periodic work.
func (c *controlPlane) round() {
	s := c.s
	defer s.w.after(cpRound, nil, c.round)
	if c.leader == 0 {
		return
	}
	c.collectReports()
	for _, n := range s.nodes {
		if c.reachable(n) {
			s.w.runIn(n, func() { c.assign(n) })
		}
	}
	c.driveMoves()
	c.removeOrphans()
	c.releaseFormers()
	c.balance()
	c.purge()
}

// collectReports takes every reachable server's report.
func (c *controlPlane) collectReports() {
	s := c.s
	for _, n := range s.nodes {
		if !c.reachable(n) {
			continue
		}
		c.heard[n.id] = s.w.now
		reps := map[uint64]configserver.GroupReport{}
		for _, g := range n.rn.Groups() {
			gs, ok := n.rn.Status(g)
			if !ok {
				continue
			}
			reps[g] = configserver.ReportGroup(n.id, gs)
		}
		c.reports[n.id] = reps
	}
	// Each group's leader: the freshest report of a leader, highest term.
	c.leaders = map[uint64]uint64{}
	terms := map[uint64]uint64{}
	for _, id := range slices.Sorted(maps.Keys(c.reports)) {
		if s.w.now-c.heard[id] >= int64(cpDownAfter) {
			continue
		}
		for _, g := range slices.Sorted(maps.Keys(c.reports[id])) {
			if r := c.reports[id][g]; r.Role == "StateLeader" && r.Term >= terms[g] {
				c.leaders[g], terms[g] = id, r.Term
			}
		}
	}
}

// leaderReport is what a group's leader last reported.
func (c *controlPlane) leaderReport(g uint64) (uint64, configserver.GroupReport, bool) {
	l, ok := c.leaders[g]
	if !ok {
		return 0, configserver.GroupReport{}, false
	}
	return l, c.reports[l][g], true
}

// assign starts the groups assigned to n that it does not host, and
// removes those it must not host any more: a deleted stream's, or a
// stream's it is no longer a replica of once its leader reports a
// membership without it.
func (c *controlPlane) assign(n *node) {
	s := c.s
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		i := slices.Index(st.Replicas, n.id)
		if i < 0 || n.grp[st.Group] != nil {
			continue
		}
		founding := i < len(st.Dirs) && st.Dirs[i] == n.dirID
		// A founder bootstraps with the founding voters, as a server does
		// (configserver.Stream.FoundingVoters): not the replicas, which
		// a move may have changed before this founder came to host it.
		voters := st.FoundingVoters()
		if s.cfg.cpBreak == "found-with-replicas" {
			voters = slices.Sorted(slices.Values(st.Replicas))
		}
		if err := c.host(n, st.Group, founding, voters); err != nil {
			// An injected disk fault (EIO, ENOSPC): the next round retries.
			s.w.record("n%d cannot host %s (group %d) yet: %v", n.id, name, st.Group, err)
			continue
		}
		if founding && i == 0 {
			n.rn.Campaign(st.Group) // the preferred leader campaigns once founded
		}
	}
	for _, g := range n.rn.Groups() {
		if g < cpFirstGroup {
			continue
		}
		if st := c.streamOf(g); st != nil && slices.Contains(st.Replicas, n.id) {
			continue
		} else if st != nil {
			l, rep, ok := c.leaderReport(g)
			if !ok || l == n.id || slices.Contains(rep.Voters, n.id) || slices.Contains(rep.Learners, n.id) {
				continue // still a member: removed from the group first
			}
		}
		c.drop(n, g)
	}
	// Files of groups nobody claims (a crash in the middle of a removal).
	for _, g := range n.assignedOnDisk() {
		if n.grp[g] == nil && c.streamOf(g) == nil {
			c.removeFiles(n, g)
		}
	}
	n.flush()
}

// streamOf is the active stream of group g.
func (c *controlPlane) streamOf(g uint64) *configserver.Stream {
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		if c.streams[name].Group == g {
			return c.streams[name]
		}
	}
	return nil
}

// host starts group g on n: founding it (bootstrapped with the replicas
// as voters) or joining it empty, to learn it from its leader.
func (c *controlPlane) host(n *node, g uint64, founding bool, voters []uint64) error {
	s := c.s
	if n.space != nil && n.space.Low() {
		// As a server: no new stream's files on a disk short of space
		// (server.hostAssigned); tried again at the next assignment.
		return fmt.Errorf("group %d not opened: disk short of space", g)
	}
	dir := path.Join(n.dir(), fmt.Sprintf("g%d", g))
	if err := n.fs.MkdirAll(dir); err != nil {
		return err
	}
	if err := n.fs.SyncDir(n.dir()); err != nil {
		return err
	}
	if founding {
		l, err := n.openLog(g)
		if err != nil {
			return err
		}
		last, _ := l.LastIndex()
		if last == 0 {
			if err := l.Bootstrap(&raftpb.ConfState{Voters: voters}); err != nil {
				return err
			}
			c.founded[[2]uint64{n.id, g}]++
			if k := c.founded[[2]uint64{n.id, g}]; k > 1 {
				s.fail(checkControlPlane, "n%d founded group %d %d times", n.id, g, k)
			}
			// Every founder bootstraps the same membership: founders
			// that disagree could each elect a leader in one term.
			if first, ok := c.bootedAs[g]; !ok {
				c.bootedAs[g] = slices.Clone(voters)
			} else if !slices.Equal(first, voters) {
				s.fail(checkControlPlane, "n%d founded group %d with voters %v, another founder with %v", n.id, g, voters, first)
			}
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	s.w.record("n%d hosts group %d (founding %v)", n.id, g, founding)
	return n.openGroup(g)
}

// drop stops group g on n and removes its data.
func (c *controlPlane) drop(n *node, g uint64) {
	n.rn.RemoveGroup(g)
	if l := n.logs[g]; l != nil {
		_ = l.Close()
	}
	if v := n.grp[g]; v != nil {
		v.bump()
	}
	delete(n.logs, g)
	delete(n.grp, g)
	delete(n.promised, g)
	c.removeFiles(n, g)
	c.s.w.record("n%d removed group %d", n.id, g)
}

func (c *controlPlane) removeFiles(n *node, g uint64) {
	if c.s.cfg.cpBreak == "removal" {
		return
	}
	dir := path.Join(n.dir(), fmt.Sprintf("g%d", g))
	names, _ := n.fs.List(dir)
	for _, name := range names {
		if err := n.fs.Remove(path.Join(dir, name)); err != nil {
			return // an injected disk fault: the next round retries
		}
	}
	if n.fs.Remove(dir) == nil {
		_ = n.fs.SyncDir(n.dir())
	}
}

// assignedOnDisk lists the dynamic groups whose logs are on n's disk.
func (n *node) assignedOnDisk() []uint64 {
	if n.s.cp == nil {
		return nil
	}
	names, _ := n.fs.List(n.dir())
	var out []uint64
	for _, name := range names {
		var g uint64
		if _, err := fmt.Sscanf(name, "g%d", &g); err == nil && g >= cpFirstGroup {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// driveMoves takes each active move one step further, as the production
// driver does, with configserver.NextMoveAction's decision.
func (c *controlPlane) driveMoves() {
	s := c.s
	for _, name := range slices.Sorted(maps.Keys(c.moves)) {
		m := c.moves[name]
		if m.State != configserver.MoveActive || c.recording[name] {
			continue
		}
		l, rep, ok := c.leaderReport(m.Group)
		if !ok {
			continue
		}
		a := configserver.NextMoveAction(*m, rep, l)
		switch a.Kind {
		case configserver.ActRecord:
			c.recording[name] = true
			cmd := cpCmd{kind: "move-step", name: name, step: a.Step, reason: a.Reason}
			if a.Cmd == configserver.CmdMoveEnd {
				cmd.kind = "move-end"
			}
			term := c.term
			c.propose(cmd, func(err error) {
				if c.term == term {
					delete(c.recording, name)
				}
				s.w.record("config: %s %s %s: %v", cmd.kind, name, cmd.step, err)
			})
		case configserver.ActAddLearner:
			c.memberChange(l, m.Group, name, server.AddLearner, a.Node)
		case configserver.ActPromote:
			c.memberChange(l, m.Group, name, server.Promote, a.Node)
		case configserver.ActRemove:
			c.memberChange(l, m.Group, name, server.Remove, a.Node)
		case configserver.ActTransfer:
			if ln := s.node(l); ln != nil && c.reachable(ln) {
				s.w.record("config: move of %s: leadership n%d -> n%d first", name, l, a.Node)
				s.w.runIn(ln, func() {
					ln.rn.TransferLeader(m.Group, a.Node)
					ln.flush()
				})
			}
		}
	}
}

// removeOrphans removes, from streams with no active move, the members
// their catalog does not have (configserver.Orphans: a cancelled move's
// target whose add was in flight), as the production driver does.
func (c *controlPlane) removeOrphans() {
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		if c.moving(st.Group) || c.s.cfg.cpBreak == "orphans" {
			continue
		}
		l, rep, ok := c.leaderReport(st.Group)
		if !ok {
			continue
		}
		if o := configserver.Orphans(*st, rep); len(o) > 0 {
			c.memberChange(l, st.Group, name, server.Remove, o[0])
		}
	}
}

// releaseFormers releases the former replicas that no longer count
// (configserver.ReleasedFormers: the copy gone, no membership with it), as
// the production driver does; a move may then take the stream back.
func (c *controlPlane) releaseFormers() {
	s := c.s
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		key := "former/" + name
		if len(st.Former) == 0 || c.moving(st.Group) || c.recording[key] {
			continue
		}
		views := map[uint64]configserver.GroupView{}
		for _, n := range s.nodes {
			t, ok := c.heard[n.id]
			v := configserver.GroupView{Heard: ok && s.w.now-t < int64(cpDownAfter)}
			if r, ok := c.reports[n.id][st.Group]; ok {
				v.Hosts, v.Members = true, append(slices.Clone(r.Voters), r.Learners...)
			}
			views[n.id] = v
		}
		rel := configserver.ReleasedFormers(*st, false, views)
		if s.cfg.cpBreak == "release-early" {
			rel = nil
			for _, x := range st.Former {
				if v := views[x]; v.Heard && !v.Hosts {
					rel = append(rel, x)
				}
			}
		}
		if len(rel) == 0 {
			continue
		}
		c.recording[key] = true
		term := c.term
		c.propose(cpCmd{kind: "former-released", name: name, to: rel[0]}, func(err error) {
			if c.term == term {
				delete(c.recording, key)
			}
			s.w.record("config: former-released %s n%d: %v", name, rel[0], err)
		})
	}
}

// memberChange asks group g's leader for a membership change, checked
// like the servers' member API.
func (c *controlPlane) memberChange(leader, g uint64, stream string, ch server.MemberChange, id uint64) {
	s := c.s
	l := s.node(leader)
	if l == nil || !c.reachable(l) || c.changing[g] > s.w.now {
		return
	}
	gs, ok := l.rn.Status(g)
	if !ok {
		return
	}
	up, conn := l.connected(s.node(id))
	cand, dir := l.roster.Candidate(id, up, conn)
	if err := server.CheckMemberChange(ch, gs, stream, cand, l.id); err != nil {
		s.w.record("config: %s g%d %v n%d not now: %v", stream, g, ch.ConfChange(), id, err)
		return
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: ch.ConfChange().Enum(), NodeId: new(id)}}}
	if ch != server.Remove {
		cc.Context = server.MemberContext(id, dir, l.roster.MemberDirs(g, l.id, l.dirID))
	}
	c.changing[g] = s.w.now + int64(3*time.Second)
	s.w.runIn(l, func() {
		l.proposeConfChange(g, cc, func(err error) {
			delete(c.changing, g)
			s.w.record("config: %s g%d %v n%d: %v", stream, g, ch.ConfChange(), id, err)
		})
	})
}

// fresh: the leader has heard every server, or led for down_after.
func (c *controlPlane) fresh() bool {
	if c.s.w.now-c.since >= int64(cpDownAfter) {
		return true
	}
	for _, n := range c.s.nodes {
		if _, ok := c.heard[n.id]; !ok && !n.quarantined {
			return false
		}
	}
	return true
}

// balance runs the production balancer's plan and carries it out.
func (c *controlPlane) balance() {
	s := c.s
	if !c.fresh() {
		return
	}
	v := configserver.BalanceView{Servers: map[uint64]configserver.Server{}, Leaders: c.leaders,
		Reports: map[uint64]configserver.GroupReport{}, Up: map[uint64]bool{}}
	for _, n := range s.nodes {
		v.Servers[n.id] = c.server(n)
		t, ok := c.heard[n.id]
		v.Up[n.id] = ok && s.w.now-t < int64(cpDownAfter)
	}
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		v.Streams = append(v.Streams, *st)
		if _, rep, ok := c.leaderReport(st.Group); ok {
			v.Reports[st.Group] = rep
		}
	}
	plan, _, _ := configserver.PlanTransfers(v, &c.mem, c.now(), cpBalanceAfter)
	if s.cfg.cpBreak == "balancer" {
		plan = nil
	}
	for i, t := range plan {
		if i >= cpMaxTransfers {
			break
		}
		l := s.node(t.From)
		c.mem.Last[t.Stream.Name] = c.now()
		if l == nil || !c.reachable(l) {
			continue
		}
		c.counts["balancer-transfer"]++
		s.w.record("config: balancer: %s n%d -> n%d: %s", t.Stream.Name, t.From, t.To, t.Reason)
		s.w.runIn(l, func() {
			l.rn.TransferLeader(t.Stream.Group, t.To)
			l.flush()
		})
	}
}

// purge forgets a deleted stream once none of its replicas, heard from
// in this leader's term, reports its group.
func (c *controlPlane) purge() {
	for _, g := range slices.Sorted(maps.Keys(c.tombs)) {
		st := c.tombs[g]
		gone := true
		for _, id := range st.Replicas {
			n := c.s.node(id)
			if n.quarantined {
				continue
			}
			if _, ok := c.heard[id]; !ok || c.reports[id] == nil {
				gone = false
				break
			}
			if _, ok := c.reports[id][g]; ok {
				gone = false
				break
			}
		}
		if gone {
			c.propose(cpCmd{kind: "purge", group: g}, func(error) {})
		}
	}
}
