package configserver

import (
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
	full = r
	full.Base, full.Gone = 0, nil
	full.Groups = make([]GroupReport, 0, len(byGroup))
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		full.Groups = append(full.Groups, byGroup[g])
	}
	return full, true
}
