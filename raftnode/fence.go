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

func (f *Fence) finish(err error) {
	f.err = err
	close(f.done)
}

// fenceRound is a group's fences: those waiting for the round in flight
// (cur, with its read index once known) and those for the next round.
type fenceRound struct {
	inflight  bool
	cur, next []*Fence
	index     uint64 // read index of the round in flight; 0 until raft answers
}

// Fence starts (or joins) a leadership confirmation for a read of group.
func (h *Host) Fence(group uint64) *Fence {
	f := &Fence{done: make(chan struct{})}
	if err := h.do(func() { h.fenceAdd(group, f) }); err != nil {
		f.finish(err)
	}
	return f
}

// fenceAdd runs on the core goroutine.
func (h *Host) fenceAdd(group uint64, f *Fence) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	r := h.fences[group]
	if r == nil {
		r = &fenceRound{}
		h.fences[group] = r
	}
	r.next = append(r.next, f)
	if !r.inflight {
		h.fenceStart(group, r)
	}
}

// fenceStart issues a ReadIndex for the fences waiting; core goroutine,
// fmu held.
func (h *Host) fenceStart(group uint64, r *fenceRound) {
	r.inflight, r.cur, r.next, r.index = true, r.next, nil, 0
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		h.fenceEnd(group, r, h.err)
		return
	}
	h.nextID++
	id := h.nextID
	h.futures[id] = func(res Result, err error) { h.fenceAnswer(group, r, res.Index, err) }
	h.mu.Unlock()
	h.core.ReadIndex(group, id)
}

// fenceAnswer handles raft's answer (core goroutine, via complete; or the
// stop path with an error).
func (h *Host) fenceAnswer(group uint64, r *fenceRound, index uint64, err error) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if err != nil {
		h.fenceEnd(group, r, err)
		return
	}
	h.mu.Lock()
	v, ok := h.status[group]
	applied := uint64(0)
	if ok {
		applied = v.applied
	}
	h.mu.Unlock()
	r.index = max(index, 1)
	if applied >= index {
		h.fenceEnd(group, r, nil)
	}
}

// fenceApplied completes a round whose read index is now applied.
func (h *Host) fenceApplied(group, applied uint64) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if r := h.fences[group]; r != nil && r.inflight && r.index != 0 && applied >= r.index {
		h.fenceEnd(group, r, nil)
	}
}

// fenceEnd finishes the round in flight and starts the next; fmu held.
func (h *Host) fenceEnd(group uint64, r *fenceRound, err error) {
	for _, f := range r.cur {
		f.finish(err)
	}
	r.cur, r.inflight, r.index = nil, false, 0
	if len(r.next) == 0 {
		return
	}
	if herr := h.Err(); herr != nil { // stopped: nothing will answer
		for _, f := range r.next {
			f.finish(herr)
		}
		r.next = nil
		return
	}
	h.fenceStart(group, r)
}
