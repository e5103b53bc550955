package raftnode

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// GroupStatus is a snapshot of one group as this server sees it.
type GroupStatus struct {
	Group         uint64   `json:"group"`
	Leader        uint64   `json:"leader"`
	Role          string   `json:"role"`
	Term          uint64   `json:"term"`
	Commit        uint64   `json:"commit"`
	Applied       uint64   `json:"applied"`
	HighWatermark int64    `json:"high_watermark"`
	Voters        []uint64 `json:"voters"`
	Learners      []uint64 `json:"learners,omitempty"`
	// InSync lists the voters known to have every committed entry and to
	// have been heard from within an election timeout (Kafka's ISR). Only
	// the leader knows; elsewhere it repeats Voters.
	InSync      []uint64            `json:"in_sync"`
	Progress    map[uint64]Progress `json:"progress,omitempty"`
	Uncommitted uint64              `json:"uncommitted_bytes"`
	Pending     int                 `json:"pending_proposals"`
	// LeaderChanges counts the changes of the known leader (to none
	// included) since the group started on this server.
	LeaderChanges uint64 `json:"leader_changes"`
}

// Progress is the leader's view of one replica.
type Progress struct {
	Match        uint64 `json:"match"`
	Next         uint64 `json:"next"`
	State        string `json:"state"`
	RecentActive bool   `json:"recent_active"` // heard from within an election timeout
}

// Status returns the group's status; ok is false for an unknown group.
func (c *Core) Status(group uint64) (GroupStatus, bool) {
	g, found := c.groups[group]
	if !found {
		return GroupStatus{}, false
	}
	q := c.q.quiet[group]
	if q != nil && q.status != nil {
		return *q.status, true
	}
	s := c.status(g)
	if q != nil {
		q.status = &s
	}
	return s, true
}

// status computes a group's status (raft's Status copies its progress and
// configuration: a few microseconds a group).
func (c *Core) status(g *group) GroupStatus {
	c.syncTicks(g)
	st := c.raw(g).Status()
	s := GroupStatus{
		Group:         g.id,
		Leader:        st.Lead,
		Role:          st.RaftState.String(),
		Term:          st.GetTerm(),
		Commit:        st.GetCommit(),
		Applied:       g.applied,
		HighWatermark: g.hwm,
		Uncommitted:   g.uncommitted,
		Pending:       len(g.pending),
		LeaderChanges: g.leadChanges,
	}
	for id := range st.Config.Voters.IDs() {
		s.Voters = append(s.Voters, id)
	}
	slices.Sort(s.Voters)
	for id := range st.Config.Learners {
		s.Learners = append(s.Learners, id)
	}
	slices.Sort(s.Learners)
	if st.RaftState != raft.StateLeader {
		s.InSync = s.Voters
		return s
	}
	s.Progress = map[uint64]Progress{}
	for _, id := range s.Voters {
		pr, ok := st.Progress[id]
		if !ok {
			continue
		}
		s.Progress[id] = c.progressOf(g, id, pr)
		if id == c.cfg.ID || (s.Progress[id].RecentActive && pr.Match >= s.Commit) {
			s.InSync = append(s.InSync, id)
		}
	}
	for _, id := range s.Learners {
		if pr, ok := st.Progress[id]; ok {
			s.Progress[id] = c.progressOf(g, id, pr)
		}
	}
	return s
}

// progressOf reports a replica's progress. RecentActive: heard from within
// an election timeout (raft clears its own flag at every CheckQuorum round,
// so right after one it says nothing about who is alive; and a group that
// slept since keeps the flag of before: a silent replica is not active).
func (c *Core) progressOf(g *group, id uint64, pr tracker.Progress) Progress {
	heard, ok := g.heard[id]
	active := id == c.cfg.ID || (!c.silent(g, id) &&
		(pr.RecentActive || (ok && g.ticks-heard <= uint64(c.cfg.ElectionTick)) || c.quietAlive(g.id, id)))
	return Progress{Match: pr.Match, Next: pr.Next, State: pr.State.String(), RecentActive: active}
}
