package raftnode

import "go.etcd.io/raft/v3/raftpb"

// What every driver of the core (the production Host, the test drivers,
// the simulator) does alike with the storage effects.

// WriteAppend writes a MsgStorageAppend's entries and hard state. A
// snapshot it carries is installed before, by the driver.
func WriteAppend(l Log, m *raftpb.Message) error {
	var hs *raftpb.HardState
	if m.Term != nil || m.Vote != nil || m.Commit != nil {
		hs = &raftpb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
	}
	if len(m.GetEntries()) == 0 && hs == nil {
		return nil
	}
	return l.Write(m.GetEntries(), hs)
}

// Replaces reports whether writing m replaces entries already written (a
// conflict truncation) or the whole log (a snapshot): a pipelining driver
// must first wait until everything written before is durable and reported.
func Replaces(l Log, m *raftpb.Message) bool {
	if m.GetSnapshot().GetMetadata().GetIndex() != 0 {
		return true
	}
	ents := m.GetEntries()
	if len(ents) == 0 {
		return false
	}
	last, err := l.LastIndex()
	return err != nil || ents[0].GetIndex() <= last
}

// EffectGroup returns the group a storage effect (Append, SaveConfState,
// Retain, SetConfig, SaveProducers, Applied, and the rest of an append
// whose snapshot was installed) belongs to.
func EffectGroup(e Effect) (uint64, bool) {
	switch e := e.(type) {
	case Append:
		return e.Group, true
	case installed:
		// Known here so that a group removed while it waits for the writer
		// takes it out of the queue with the rest: left in, it was written
		// to the log of no group (simulator seed 3006 with the control
		// plane: a nil log, the server panicked) or, had the group been
		// added back meanwhile, to its new log.
		return e.a.Group, true
	case SaveConfState:
		return e.Group, true
	case Retain:
		return e.Group, true
	case SetConfig:
		return e.Group, true
	case SaveProducers:
		return e.Group, true
	case Applied:
		return e.Group, true
	}
	return 0, false
}
