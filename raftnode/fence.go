package raftnode

// Read fences make a leader's reads linearizable. A leader that was cut off
// can still believe it leads until an election timeout passes, and would
// serve a stale high watermark meanwhile. Before it answers a read, a fence
// confirms leadership with a quorum (Raft's ReadIndex) in a round that began
// after the read arrived, and waits until the read index is applied. Reads
// that arrive while a round is in flight share the next round, so a busy
// server runs one round at a time per group.

// Fence is one read's wait for a confirmation of leadership.
type Fence struct {
	done chan struct{}
	err  error
}

// NewFence returns a fence not yet passed; Node.Fence starts it.
func NewFence() *Fence { return &Fence{done: make(chan struct{})} }

// Done is closed when the fence has passed or failed.
func (f *Fence) Done() <-chan struct{} { return f.done }

// Err is nil when the fence passed: this server led the group at some point
// after Fence was called and has applied everything committed before then.
// Call it after Done is closed.
func (f *Fence) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Passed reports whether the fence is done and passed.
func (f *Fence) Passed() bool {
	select {
	case <-f.done:
		return f.err == nil
	default:
		return false
	}
}

// Finish ends the fence with err (nil: passed). Only the first call counts.
func (f *Fence) Finish(err error) {
	select {
	case <-f.done:
	default:
		f.err = err
		close(f.done)
	}
}

// fenceRound is a group's fences: those waiting for the round in flight
// (cur, with its read index once known) and those for the next round.
type fenceRound struct {
	inflight  bool
	cur, next []*Fence
	index     uint64 // read index of the round in flight; 0 until raft answers
}

// internalID marks the ids of the Node's own requests (read index rounds);
// drivers number their proposals below it.
const internalID ProposalID = 1 << 63

// Fence starts (or joins) a confirmation of leadership for a read of group;
// f finishes when it passes or fails.
func (n *Node) Fence(group uint64, f *Fence) {
	if n.err != nil {
		f.Finish(n.err)
		return
	}
	r := n.fences[group]
	if r == nil {
		r = &fenceRound{}
		n.fences[group] = r
	}
	r.next = append(r.next, f)
	if !r.inflight {
		n.fenceStart(group, r)
	}
}

// fenceStart issues a ReadIndex for the fences waiting.
func (n *Node) fenceStart(group uint64, r *fenceRound) {
	r.inflight, r.cur, r.next, r.index = true, r.next, nil, 0
	n.nextInternal++
	id := internalID | n.nextInternal
	n.reads[id] = group
	n.core.ReadIndex(group, id)
}

// fenceAnswer handles raft's answer to a round's ReadIndex.
func (n *Node) fenceAnswer(group uint64, index uint64, err error) {
	r := n.fences[group]
	if r == nil || !r.inflight {
		return
	}
	if err != nil {
		n.fenceEnd(group, r, err)
		return
	}
	r.index = max(index, 1)
	if n.views[group].Applied >= index {
		n.fenceEnd(group, r, nil)
	}
}

// fenceApplied completes a round whose read index is now applied.
func (n *Node) fenceApplied(group, applied uint64) {
	if r := n.fences[group]; r != nil && r.inflight && r.index != 0 && applied >= r.index {
		n.fenceEnd(group, r, nil)
	}
}

// fenceEnd finishes the round in flight and starts the next.
func (n *Node) fenceEnd(group uint64, r *fenceRound, err error) {
	for _, f := range r.cur {
		f.Finish(err)
	}
	r.cur, r.inflight, r.index = nil, false, 0
	if len(r.next) == 0 {
		return
	}
	if n.err != nil {
		for _, f := range r.next {
			f.Finish(n.err)
		}
		r.next = nil
		return
	}
	n.fenceStart(group, r)
}

// failFences ends every fence with err.
func (n *Node) failFences(err error) {
	for _, g := range sortedGroups(n.fences) {
		r := n.fences[g]
		for _, f := range append(r.cur, r.next...) {
			f.Finish(err)
		}
		delete(n.fences, g)
	}
}
