package server

import "github.com/vdl-project/vdl/configserver"

// reporter turns the server's reports into deltas of the last one answered
// (configserver/delta.go): at 10,000 streams a full report every two
// seconds cost an idle server more CPU than its Raft groups did. It is the
// report loop's alone.
type reporter struct {
	seq        uint64                              // the last report's number
	base       uint64                              // the last report answered (0: report in full)
	fullAt     uint64                              // the last full report's number
	groups     map[uint64]configserver.GroupReport // what report base said, by group
	leadersGen uint64                              // the leaders held from an answer
}

// next numbers the server's report r (every group it hosts) and makes it a
// delta when it can; cur is r's groups in full, for answered.
func (p *reporter) next(r configserver.Report) (out configserver.Report, cur []configserver.GroupReport) {
	p.seq++
	r.Seq, r.LeadersGen, cur = p.seq, p.leadersGen, r.Groups
	if p.base == 0 || p.seq-p.fullAt >= configserver.FullReportEvery {
		p.fullAt = p.seq
		return r, cur
	}
	r.Base = p.base
	r.Groups, r.Gone = configserver.DiffReport(p.groups, cur)
	return r, cur
}

// answered records that report r, whose groups in full were cur, was
// answered with a.
func (p *reporter) answered(r configserver.Report, cur []configserver.GroupReport, a configserver.Assignment) {
	if a.NeedFull {
		p.lost()
		return
	}
	p.base = r.Seq
	if r.Base != 0 && p.groups != nil { // a delta of what p.groups holds: it makes cur of them
		for _, g := range r.Groups {
			p.groups[g.Group] = g
		}
		for _, g := range r.Gone {
			delete(p.groups, g)
		}
	} else {
		p.groups = make(map[uint64]configserver.GroupReport, len(cur))
		for _, g := range cur {
			p.groups[g.Group] = g
		}
	}
	if a.Leaders != nil || a.LeadersGen != p.leadersGen {
		p.leadersGen = a.LeadersGen
	}
}

// lost forgets the base: the report failed, or its answer did not arrive,
// so whether the config servers hold it is unknown; the next is full.
func (p *reporter) lost() { p.base, p.groups = 0, nil }
