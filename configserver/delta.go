package configserver

import (
	"cmp"
	"maps"
	"slices"
)

// Delta reports. A server reports every group it hosts every two seconds,
// and at 10,000 streams most of a report is what the previous one said:
// encoding, sending and decoding it was a third of an idle server's CPU.
// So a server numbers its reports (Seq) and, once a report was answered,
// sends only what changed since (Base: the report it is a delta of; Groups:
// the groups whose report changed; Gone: those no longer hosted). The
// leader keeps each server's merged report. A delta whose base it does not
// hold (it just took over, or the answer to the base was lost) is answered
// NeedFull, and the server reports in full at once. A server also reports
// in full every FullReportEvery reports, whatever happened.
//
// The answer's Leaders (every stream's leader) is sent likewise only when
// the server does not hold it: LeadersGen names the leaders a config
// server leader derived (its term and a count), and together with the
// catalog version it names the whole map.

// FullReportEvery is how often a server reports in full although its
// deltas are answered (one report in 30: a minute at the default interval).
const FullReportEvery = 30

// DiffReport is what changed from prev (a server's last answered report,
// by group) to cur: the groups whose report differs or is new, in cur's
// order, and the groups of prev no longer in cur, sorted.
func DiffReport(prev map[uint64]GroupReport, cur []GroupReport) (changed []GroupReport, gone []uint64) {
	in := make(map[uint64]bool, len(cur))
	for _, g := range cur {
		in[g.Group] = true
		if p, ok := prev[g.Group]; !ok || !sameGroupReport(p, g) {
			changed = append(changed, g)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(prev)) {
		if !in[g] {
			gone = append(gone, g)
		}
	}
	return changed, gone
}

// sameGroupReport reports whether two reports of a group say the same.
func sameGroupReport(a, b GroupReport) bool {
	return a.Group == b.Group && a.Role == b.Role && a.Leader == b.Leader && a.Term == b.Term &&
		a.Commit == b.Commit && a.Applied == b.Applied && a.Lag == b.Lag && a.HighWatermark == b.HighWatermark &&
		slices.Equal(a.Followers, b.Followers) && slices.Equal(a.Voters, b.Voters) && slices.Equal(a.Learners, b.Learners)
}

// mergeReport is the whole report r stands for, given prev, the server's
// last report held here (nil: none). A full report (Base 0) stands for
// itself; a delta needs prev to be its base, and ok is false otherwise.
// The groups come out sorted by id, as servers report them.
func mergeReport(prev *Report, r Report) (full Report, ok bool) {
	if r.Base == 0 {
		return r, true
	}
	if prev == nil || prev.Seq != r.Base {
		return Report{}, false
	}
	full = r
	full.Base, full.Gone = 0, nil
	if len(r.Groups) == 0 && len(r.Gone) == 0 {
		full.Groups = prev.Groups // nothing changed: shared, never changed
		return full, true
	}
	if merged, ok := mergeSorted(prev.Groups, r.Groups, r.Gone); ok {
		full.Groups = merged
		return full, true
	}
	byGroup := make(map[uint64]GroupReport, len(prev.Groups)+len(r.Groups))
	for _, g := range prev.Groups {
		byGroup[g.Group] = g
	}
	for _, g := range r.Groups {
		byGroup[g.Group] = g
	}
	for _, g := range r.Gone {
		delete(byGroup, g)
	}
	full.Groups = make([]GroupReport, 0, len(byGroup))
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		full.Groups = append(full.Groups, byGroup[g])
	}
	return full, true
}

// mergeSorted is prev with changed's groups set and gone's removed, in one
// pass: each report of a server with 10,000 streams merged through a map
// and a sort cost the config servers' leader milliseconds. ok is false
// unless all three are sorted by group without repeats (as servers send
// them); mergeReport then merges through a map.
func mergeSorted(prev, changed []GroupReport, gone []uint64) (out []GroupReport, ok bool) {
	byID := func(a, b GroupReport) int { return cmp.Compare(a.Group, b.Group) }
	if !strictlySorted(prev, byID) || !strictlySorted(changed, byID) || !strictlySorted(gone, cmp.Compare[uint64]) {
		return nil, false
	}
	out = make([]GroupReport, 0, len(prev)+len(changed))
	i, j, k := 0, 0, 0
	for i < len(prev) || j < len(changed) {
		var g GroupReport
		switch {
		case j == len(changed) || i < len(prev) && prev[i].Group < changed[j].Group:
			g = prev[i]
			i++
		case i == len(prev) || changed[j].Group < prev[i].Group:
			g = changed[j]
			j++
		default: // the same group: the change wins
			g = changed[j]
			i, j = i+1, j+1
		}
		for k < len(gone) && gone[k] < g.Group {
			k++
		}
		if k < len(gone) && gone[k] == g.Group {
			continue
		}
		out = append(out, g)
	}
	return out, true
}

// strictlySorted reports whether s is sorted by cmp with no two equal.
func strictlySorted[T any](s []T, cmp func(a, b T) int) bool {
	for i := 1; i < len(s); i++ {
		if cmp(s[i-1], s[i]) >= 0 {
			return false
		}
	}
	return true
}
