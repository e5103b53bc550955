package raftnode

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Durable is what a server has told raft one group's log holds on its
// disk: the hard state and the last entry of every append it reported
// durable, and the membership it applied. Raft's safety rests on a restart
// finding at least this — a forgotten vote lets a server vote twice in a
// term, a forgotten entry that was acknowledged can lose a committed
// write, a forgotten membership change makes a server count the wrong
// quorum. The simulator checks it after every crash (Check), so a promise
// broken anywhere between the Node and the disk is caught where it is
// broken, not by whatever happens to go wrong later.
type Durable struct {
	Term, Vote          uint64 // the last hard state reported durable
	LastIndex, LastTerm uint64 // the log's last entry, as reported durable
	// Cut: a write replacing entries from Cut+1 on (a conflict truncation,
	// a snapshot install) is under way, so a restart may find the log
	// shorter than LastIndex, down to Cut: raft asked for it.
	Cut *uint64
	// Conf is the membership applied last; a restart finds it, or one of
	// Pending (changes handed to the writer and not yet reported written,
	// the membership of a snapshot being installed).
	Conf    *raftpb.ConfState
	Pending []*raftpb.ConfState
}

// Durable returns what the node has promised raft about group's log (see
// Durable).
func (n *Node) Durable(group uint64) (Durable, bool) {
	d, ok := n.durable[group]
	if !ok {
		return Durable{}, false
	}
	d.Pending = slices.Clone(d.Pending)
	if j := n.installs[group]; j != nil {
		d.Pending = append(d.Pending, j.Append.Msg.GetSnapshot().GetMetadata().GetConfState())
	}
	return d, true
}

// found records what a log holds when the node starts hosting it.
func (n *Node) found(group uint64, l Log) {
	d := Durable{}
	if hs, cs, err := l.InitialState(); err == nil {
		d.Term, d.Vote, d.Conf = hs.GetTerm(), hs.GetVote(), cs
	}
	d.LastIndex = lastIndex(l)
	d.LastTerm, _ = l.Term(d.LastIndex)
	n.durable[group] = d
}

// handed notes a storage effect handed to the writer: what a restart may
// find before it is reported durable.
func (n *Node) handed(e Effect) {
	g, _ := EffectGroup(e)
	d, ok := n.durable[g]
	if !ok {
		return
	}
	switch e := e.(type) {
	case SaveConfState:
		d.Pending = append(d.Pending, e.Conf)
	case Append:
		if ents := e.Msg.GetEntries(); len(ents) > 0 && ents[0].GetIndex() <= d.LastIndex {
			cut := ents[0].GetIndex() - 1
			if d.Cut == nil || cut < *d.Cut {
				d.Cut = &cut
			}
		}
		if e.Msg.GetSnapshot().GetMetadata().GetIndex() != 0 {
			d.Cut = new(uint64(0)) // an install may keep only a prefix
		}
	}
	n.durable[g] = d
}

// installedConf notes a snapshot install that finished: its membership is
// on disk, reported durable with the append that carried it.
func (n *Node) installedConf(a Append) {
	if d, ok := n.durable[a.Group]; ok {
		d.Pending = append(d.Pending, a.Msg.GetSnapshot().GetMetadata().GetConfState())
		n.durable[a.Group] = d
	}
}

// confWritten notes a membership change the writer wrote (durable on
// return: storage.Log.ApplyConfState).
func (n *Node) confWritten(e SaveConfState) {
	d, ok := n.durable[e.Group]
	if !ok {
		return
	}
	d.Conf = e.Conf
	if i := slices.IndexFunc(d.Pending, func(cs *raftpb.ConfState) bool { return cs == e.Conf }); i >= 0 {
		d.Pending = slices.Delete(d.Pending, i, i+1)
	}
	n.durable[e.Group] = d
}

// appendDone reports an append durable to raft, recording the promise.
func (n *Node) appendDone(a Append) {
	if d, ok := n.durable[a.Group]; ok {
		m := a.Msg
		if m.Term != nil || m.Vote != nil {
			d.Term, d.Vote = m.GetTerm(), m.GetVote()
		}
		if md := m.GetSnapshot().GetMetadata(); md.GetIndex() != 0 {
			d.LastIndex, d.LastTerm, d.Conf = md.GetIndex(), md.GetTerm(), md.GetConfState()
			d.Pending = slices.DeleteFunc(d.Pending, func(cs *raftpb.ConfState) bool { return cs == d.Conf })
		}
		if ents := m.GetEntries(); len(ents) > 0 {
			last := ents[len(ents)-1]
			d.LastIndex, d.LastTerm = last.GetIndex(), last.GetTerm()
		}
		if d.Cut != nil && n.pipe.last[a.Group] <= d.LastIndex {
			d.Cut = nil // nothing written after this append is pending
		}
		n.durable[a.Group] = d
	}
	n.core.AppendDone(a.Group, a.Msg)
}

// Check reports how the log l, reopened after a crash, breaks the promise
// d, or nil.
func (d Durable) Check(l Log) error {
	hs, cs, err := l.InitialState()
	if err != nil {
		return err
	}
	var errs []error
	switch {
	case hs.GetTerm() < d.Term:
		errs = append(errs, fmt.Errorf("hard state went back from term %d (vote %d) to term %d", d.Term, d.Vote, hs.GetTerm()))
	case hs.GetTerm() == d.Term && d.Vote != 0 && hs.GetVote() != d.Vote:
		errs = append(errs, fmt.Errorf("forgot its vote in term %d: voted %d, found %d", d.Term, d.Vote, hs.GetVote()))
	}
	last := lastIndex(l)
	floor := d.LastIndex
	if d.Cut != nil {
		floor = min(floor, *d.Cut)
	}
	if last < floor {
		errs = append(errs, fmt.Errorf("log ends at %d, but entries up to %d (term %d) were reported durable", last, d.LastIndex, d.LastTerm))
	} else if d.Cut == nil {
		t, err := l.Term(d.LastIndex)
		if err == nil && t != d.LastTerm {
			errs = append(errs, fmt.Errorf("entry %d has term %d, but term %d was reported durable", d.LastIndex, t, d.LastTerm))
		} else if err != nil && !errors.Is(err, raft.ErrCompacted) {
			errs = append(errs, fmt.Errorf("entry %d reported durable: %w", d.LastIndex, err))
		}
	}
	if d.Conf != nil && !sameConf(cs, d.Conf) && !slices.ContainsFunc(d.Pending, func(p *raftpb.ConfState) bool { return sameConf(cs, p) }) {
		errs = append(errs, fmt.Errorf("membership went back: applied %v, found %v", confString(d.Conf), confString(cs)))
	}
	return errors.Join(errs...)
}

func sameConf(a, b *raftpb.ConfState) bool {
	return proto.Equal(raftpb.EnsureConfState(canonConf(a)), raftpb.EnsureConfState(canonConf(b)))
}

// canonConf sorts a membership's id lists (their order carries no meaning).
func canonConf(cs *raftpb.ConfState) *raftpb.ConfState {
	c := proto.Clone(raftpb.EnsureConfState(cs)).(*raftpb.ConfState)
	for _, ids := range [][]uint64{c.Voters, c.Learners, c.VotersOutgoing, c.LearnersNext} {
		slices.Sort(ids)
	}
	return c
}

func confString(cs *raftpb.ConfState) string {
	c := canonConf(cs)
	s := fmt.Sprintf("voters %v", c.Voters)
	if len(c.Learners) > 0 {
		s += fmt.Sprintf(" learners %v", c.Learners)
	}
	if len(c.VotersOutgoing) > 0 {
		s += fmt.Sprintf(" outgoing %v", c.VotersOutgoing)
	}
	return s
}
