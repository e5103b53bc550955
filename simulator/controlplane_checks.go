package simulator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vdl-project/vdl/configserver"
)

// The control plane's liveness checks after the heal (controlplane.go).

// heal brings every config server back.
func (c *controlPlane) heal() {
	c.up = [3]bool{true, true, true}
	if c.leader == 0 {
		c.elect()
	}
}

// unsettled says why the control plane has not settled after the heal
// ("" when it has): a move still runs, a server hosts what it is not
// assigned or lacks what it is, a deleted stream's data is still on a
// disk, or a stream's leader is outside its preferred DC.
func (c *controlPlane) unsettled() string {
	s := c.s
	if c.leader == 0 {
		return "no config server leader"
	}
	for _, name := range slices.Sorted(maps.Keys(c.moves)) {
		if m := c.moves[name]; m.State == configserver.MoveActive {
			return fmt.Sprintf("the move of %s from n%d to n%d is at %s (cancel %v)", name, m.From, m.To, m.Step, m.Cancel)
		}
	}
	if len(c.tombs) > 0 {
		return fmt.Sprintf("deleted groups %v not purged", slices.Sorted(maps.Keys(c.tombs)))
	}
	for _, n := range s.nodes {
		if n.quarantined || n.down {
			continue
		}
		for _, g := range n.assignedOnDisk() {
			if c.streamOf(g) == nil {
				return fmt.Sprintf("n%d still has the data of group %d, which no stream has", n.id, g)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		l := s.leader(st.Group)
		if l == nil {
			return fmt.Sprintf("%s has no leader", name)
		}
		gs, _ := l.rn.Status(st.Group)
		if !slices.Equal(gs.Voters, slices.Sorted(slices.Values(st.Replicas))) || len(gs.Learners) > 0 {
			return fmt.Sprintf("%s: voters %v learners %v, catalog %v", name, gs.Voters, gs.Learners, st.Replicas)
		}
		for _, n := range s.nodes {
			if hosted, want := n.grp[st.Group] != nil, slices.Contains(st.Replicas, n.id); hosted != want && !n.quarantined {
				return fmt.Sprintf("n%d hosts %s: %v, assigned: %v", n.id, name, hosted, want)
			}
		}
		// Back in the preferred DC when a replica is there (a move to
		// another DC may have taken the only one away: the balancer
		// lists the stream as refused then).
		there := slices.ContainsFunc(st.Replicas, func(id uint64) bool { return fmt.Sprintf("dc%d", s.node(id).dc) == st.PreferredDC })
		if st.PreferredDC != "" && there && fmt.Sprintf("dc%d", l.dc) != st.PreferredDC {
			var progress []string // why the balancer would not move it
			for _, id := range slices.Sorted(maps.Keys(gs.Progress)) {
				pr := gs.Progress[id]
				progress = append(progress, fmt.Sprintf("n%d match %d %s", id, pr.Match, pr.State))
			}
			return fmt.Sprintf("%s: leader n%d in dc%d, preferred %s (commit %d; %s)", name, l.id, l.dc, st.PreferredDC, gs.Commit, strings.Join(progress, ", "))
		}
	}
	return ""
}

// checkCreates: each stream asked for exists exactly once, or (never
// acknowledged) not at all.
func (c *controlPlane) checkCreates() {
	s := c.s
	for _, name := range slices.Sorted(maps.Keys(c.creates)) {
		cr := c.creates[name]
		switch {
		case cr.committed > 1:
			s.fail(checkControlPlane, "create %s committed %d times", name, cr.committed)
		case cr.oks > 1:
			s.fail(checkControlPlane, "create %s acknowledged %d times", name, cr.oks)
		case cr.oks == 1 && cr.committed != 1:
			s.fail(checkControlPlane, "create %s acknowledged but committed %d times", name, cr.committed)
		}
	}
}

// summary is the control plane's figures, for the trace and the result.
func (c *controlPlane) summary() map[string]int {
	out := map[string]int{"streams": len(c.streams), "commands": c.applied}
	for _, n := range c.s.nodes {
		if n.rn != nil {
			out["learner-paced-bytes"] += int(n.rn.LearnerBytes()) // of the processes running at the end
		}
	}
	for k, v := range c.counts {
		out[k] = v
	}
	for _, cr := range c.creates {
		switch {
		case cr.committed == 1 && cr.unknown:
			out["creates-after-leader-loss"]++
		case cr.committed == 1:
			out["creates"]++
		case cr.gaveUp:
			out["creates-failed-cleanly"]++
		}
	}
	return out
}

func (c *controlPlane) String() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(c.streams)) {
		st := c.streams[name]
		fmt.Fprintf(&b, " %s(g%d %v %s)", name, st.Group, st.Replicas, st.PreferredDC)
	}
	return b.String()
}
