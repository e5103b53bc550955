package raftnode

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
)

// A leader stamps the Kafka offsets and leader epoch of the batches it
// proposes, as every replica's storage would (storage.StampBatches).
//
// The storage writes a user entry's batches stamped: into a copy of its
// own when they are not, or the entry's bytes themselves, uncopied, when
// they carry the stamps already. A leader knows where its entries go: in
// its term its log only grows, from where the term's first entry (the
// empty one raft appends on election) ends, and each entry takes the
// offsets of its batches. So it stamps raft's copy of each proposal (raft
// clones every proposal it appends: these are raft's bytes, not the
// proposer's) before anyone else sees it, followers receive the entries
// stamped, and no replica copies a produced byte into its storage again
// (a copy and an allocation of every byte, on every replica). The stamps
// are a hint: the storage checks them against its own count and stamps a
// copy when they differ (proposals stepped before the leader learnt where
// its term starts, which is once that first entry is applied).
type stamper struct {
	startTerm uint64 // the term whose first entry ends at start
	start     int64
	term      uint64 // the term of taken
	taken     int64  // offsets proposed in term
}

// noteApplied learns where a term starts from the first entry of the term
// applied (applied in order, it is the first of its term in the log).
func (c *Core) noteApplied(g *group, e *raftpb.Entry) {
	if e.GetTerm() <= g.appliedTerm {
		return
	}
	if end, err := g.st.NextOffsetAt(e.GetIndex()); err == nil {
		g.stamp.startTerm, g.stamp.start = e.GetTerm(), end
	}
}

// stamp stamps the entries raft just appended from the proposals qs
// (appended[parts[i].entry] holds qs[i]) and counts their offsets in the
// term. A merged entry is stamped whole at its first proposal: its
// batches follow one another.
func (s *stamper) stamp(appended []*raftpb.Entry, qs []queuedProposal, parts []part) {
	for i, q := range qs {
		e := appended[parts[i].entry]
		if e.GetTerm() != s.term {
			s.term, s.taken = e.GetTerm(), 0
		}
		if q.offsets == 0 {
			continue
		}
		if parts[i].skip == 0 && s.startTerm == s.term {
			storage.StampBatches(e.GetData()[1:], s.start+s.taken, s.term)
		}
		s.taken += q.offsets
	}
}
