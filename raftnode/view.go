package raftnode

// View is what a server knows about one of its groups outside the core:
// who leads, this server's role, and what it has applied. A Node publishes
// it to its driver on every change; readers (Kafka fetches, metadata, the
// admin API) decide from it alone.
type View struct {
	Leader      uint64 // 0: none known
	Term        uint64
	Role        string
	Applied     uint64
	AppliedTerm uint64 // term of the entry at Applied
	// HighWatermark is the committed and locally durable end offset.
	HighWatermark int64
}

// Readable reports whether server self leads the group and may serve
// reads: it has applied an entry of its own term, so its high watermark
// covers everything any earlier leader acknowledged.
func (v View) Readable(self uint64) bool {
	return v.Leader == self && v.AppliedTerm == v.Term && v.Term != 0
}

// Wakes reports whether a change from v to w concerns waiting readers:
// leadership, the term, or the high watermark moved (the applied index
// alone does not).
func (v View) Wakes(w View) bool {
	return v.Leader != w.Leader || v.Term != w.Term || v.Role != w.Role ||
		v.HighWatermark != w.HighWatermark || v.AppliedTerm != w.AppliedTerm
}
