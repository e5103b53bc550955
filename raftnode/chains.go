package raftnode

import (
	"errors"
	"maps"
)

// Chain names the proposals of one client connection, in the order it
// made them (a Kafka connection's produces: 0 is none). Once one of a
// chain's proposals fails, every later one is refused (ErrChainFailed)
// until the chain ends.
//
// Why: after a failed produce every later request on its connection must
// fail (the connection's writes keep their order: a client that retries
// the failed one must not find a later one written before it). The front
// end stops reading after a failure, but the produces it had already
// submitted behind the failed one are on their way, and the core decides
// each on its own: one refused for backpressure by its size (or while the
// group's queue was full) could be followed by a smaller one taken, or by
// one arriving once commits drained. A chain's proposals reach the core
// in order (one connection's loop submits them, the driver's loop runs
// them), so the core, which learns of every failure first, refuses what
// follows a failure.
type Chain uint64

// ErrChainFailed: an earlier proposal of the same chain failed, so this
// one was not proposed (definite: not written).
var ErrChainFailed = errors.New("raftnode: an earlier produce on this connection failed; not written")

// chains tracks the chained proposals in flight and the chains that
// failed. A failed chain is kept until the driver ends it (EndChain: the
// connection closed), so its memory is bounded by the open connections.
type chains struct {
	of     map[ProposalID]Chain // chained proposals without an outcome yet
	failed map[Chain]struct{}
}

// admit registers proposal id of chain, or reports that the chain failed.
func (cs *chains) admit(id ProposalID, chain Chain) bool {
	if chain == 0 {
		return true
	}
	if _, failed := cs.failed[chain]; failed {
		return false
	}
	if cs.of == nil {
		cs.of = map[ProposalID]Chain{}
	}
	cs.of[id] = chain
	return true
}

// settle notes a proposal's outcome: a failure fails its chain.
func (cs *chains) settle(c Complete) {
	chain, ok := cs.of[c.ID]
	if !ok {
		return
	}
	delete(cs.of, c.ID)
	if c.Err != nil {
		if cs.failed == nil {
			cs.failed = map[Chain]struct{}{}
		}
		cs.failed[chain] = struct{}{}
	}
}

// breakOf fails the chain of proposal id, whose outcome is still to come:
// what the chain proposes next is refused.
func (cs *chains) breakOf(id ProposalID) {
	chain, ok := cs.of[id]
	if !ok {
		return
	}
	if cs.failed == nil {
		cs.failed = map[Chain]struct{}{}
	}
	cs.failed[chain] = struct{}{}
}

// end forgets a chain whose connection closed, its proposals still in
// flight included: no proposal of it comes after (the connection's loop
// submitted them all before it closed), and a failure of one of them,
// noted, would keep the chain for good.
func (cs *chains) end(chain Chain) {
	delete(cs.failed, chain)
	maps.DeleteFunc(cs.of, func(_ ProposalID, c Chain) bool { return c == chain })
}
