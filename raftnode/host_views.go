package raftnode

import "slices"

// The Host's read side: what readers on other goroutines (the Kafka front
// end, the admin API, metrics, reports to the config servers) ask about the
// groups — published views without a trip to the loop, full statuses with
// one.

// Status returns the group's full status (computed on the loop).
func (h *Host) Status(group uint64) (GroupStatus, bool) {
	var s GroupStatus
	var ok bool
	if err := h.call(func() { s, ok = h.node.Status(group) }); err != nil {
		return GroupStatus{}, false
	}
	return s, ok
}

// Statuses returns every hosted group's status, by group, in one trip to
// the loop (a server reporting thousands of groups to the config servers
// would otherwise queue one call per group behind the loop's work).
func (h *Host) Statuses() []GroupStatus {
	var out []GroupStatus
	if err := h.call(func() {
		groups := h.node.Groups()
		out = make([]GroupStatus, 0, len(groups)) // grown by appends, 10,000 statuses were copied about twice
		for _, g := range groups {
			if s, ok := h.node.Status(g); ok {
				out = append(out, s)
			}
		}
	}); err != nil {
		return nil
	}
	return out
}

// CampaignBound returns how many elections this server may start at once
// now: Config.MaxCampaigns, or less while elections time out
// (campaign.go); -1 when unbounded or stopped.
func (h *Host) CampaignBound() int {
	bound := -1
	_ = h.call(func() { bound = h.node.CampaignBound() })
	return bound
}

// Groups returns the hosted group ids, sorted.
func (h *Host) Groups() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sortedGroups(h.views)
}

// View returns the group's view as last published.
func (h *Host) View(group uint64) (View, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.views[group]
	if !ok {
		return View{}, false
	}
	return v.View, true
}

// Leader returns the group's leader as last seen (0: none) and whether the
// group is hosted here.
func (h *Host) Leader(group uint64) (leader uint64, ok bool) {
	v, ok := h.View(group)
	return v.Leader, ok
}

// Readable reports whether this server leads the group and may serve reads
// (View.Readable).
func (h *Host) Readable(group uint64) bool {
	v, ok := h.View(group)
	return ok && v.Readable(h.ID())
}

// HighWatermark returns the group's committed, locally durable end offset
// and a channel closed when it next changes (or leadership changes).
func (h *Host) HighWatermark(group uint64) (int64, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.views[group]
	if !ok {
		return 0, nil, false
	}
	return v.HighWatermark, v.changed, true
}

func sortedIDs[V any](m map[ProposalID]V) []ProposalID {
	ids := make([]ProposalID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Quiesced reports whether the group is quiesced here (asked on the loop).
func (h *Host) Quiesced(group uint64) bool {
	var q bool
	if err := h.call(func() { q = h.node.Quiesced(group) }); err != nil {
		return false
	}
	return q
}

// hosts reports whether group is hosted here.
func (h *Host) hosts(group uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.views[group]
	return ok
}
