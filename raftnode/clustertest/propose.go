package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// Proposing like a client: leader discovery and retry, and a background
// load of producers.

// Leader returns the running server that leads group by its own account
// (the one with the highest term if several still believe so), or nil.
func (c *Cluster) Leader(group uint64) *Node {
	var cands []*Node
	for _, n := range c.Running() {
		if lead, ok := n.Host().Leader(group); ok && lead == n.ID {
			cands = append(cands, n)
		}
	}
	if len(cands) <= 1 {
		if len(cands) == 1 {
			return cands[0]
		}
		return nil
	}
	var best *Node
	var bestTerm uint64
	for _, n := range cands {
		if s, ok := n.Host().Status(group); ok && s.Role == "StateLeader" && s.Term >= bestTerm {
			best, bestTerm = n, s.Term
		}
	}
	return best
}

// WaitLeader waits for a leader of group.
func (c *Cluster) WaitLeader(ctx context.Context, group uint64) (*Node, error) {
	for {
		if l := c.Leader(group); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader in group %d: %w", group, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Acked is an acknowledged proposal.
type Acked struct {
	Group  uint64
	Result raftnode.Result
	Data   []byte // the proposed Kafka batches (without the UserData tag)
	Node   uint64 // the leader that acknowledged it
}

// retryable: the proposal definitely did not commit (or its host is gone);
// try again, possibly elsewhere.
func retryable(err error) bool {
	return errors.Is(err, raftnode.ErrNotLeader) || errors.Is(err, raftnode.ErrBackpressure) ||
		errors.Is(err, raftnode.ErrOverwritten) || errors.Is(err, raftnode.ErrStopped) ||
		errors.Is(err, raftnode.ErrShutdown) || errors.Is(err, raftnode.ErrUnknownGroup) ||
		errors.Is(err, raftnode.ErrUnknownOutcome) || errors.Is(err, raftnode.ErrConfChangeRejected)
}

// AttemptTimeout bounds one proposal attempt on one leader; after it the
// outcome is unknown and the helper tries again (so an entry may appear
// twice in the log, as with any client retry).
const AttemptTimeout = 3 * time.Second

// Propose proposes Kafka batches in group on its current leader, retrying
// on definite failures and on attempt timeouts until ctx ends.
func (c *Cluster) Propose(ctx context.Context, group uint64, batches []byte) (Acked, error) {
	data := raftnode.UserData(batches)
	for {
		l, err := c.WaitLeader(ctx, group)
		if err != nil {
			return Acked{}, err
		}
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		r, err := l.Host().Propose(actx, group, data)
		cancel()
		switch {
		case err == nil:
			return Acked{Group: group, Result: r, Data: batches, Node: l.ID}, nil
		case ctx.Err() != nil:
			return Acked{}, ctx.Err()
		case retryable(err) || errors.Is(err, context.DeadlineExceeded):
			select {
			case <-ctx.Done():
				return Acked{}, ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		default:
			return Acked{}, err
		}
	}
}

// ProposeCommand proposes a command payload (e.g. raftnode.RetainData).
func (c *Cluster) ProposeCommand(ctx context.Context, group uint64, data []byte) (raftnode.Result, error) {
	for {
		l, err := c.WaitLeader(ctx, group)
		if err != nil {
			return raftnode.Result{}, err
		}
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		r, err := l.Host().Propose(actx, group, data)
		cancel()
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return raftnode.Result{}, ctx.Err()
		case retryable(err) || errors.Is(err, context.DeadlineExceeded):
			time.Sleep(5 * time.Millisecond)
		default:
			return raftnode.Result{}, err
		}
	}
}

// ProposeConfChange proposes a membership change on the leader, retrying
// on definite failures, and waits until it applied there.
func (c *Cluster) ProposeConfChange(ctx context.Context, group uint64, cc *raftpb.ConfChangeV2) error {
	for {
		l, err := c.WaitLeader(ctx, group)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err = l.Host().ProposeConfChange(actx, group, cc)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case retryable(err) || errors.Is(err, context.DeadlineExceeded):
			time.Sleep(5 * time.Millisecond)
		default:
			return err
		}
	}
}

// Load runs proposers that keep proposing small batches in a group until
// stopped, recording every acknowledgment.
type Load struct {
	c      *Cluster
	group  uint64
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	acked []Acked
	errs  []error
}

// StartLoad starts workers proposers; each proposes valueSize-byte values
// tagged with prefix, worker and sequence number, one at a time.
func (c *Cluster) StartLoad(group uint64, workers, valueSize int, prefix string) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &Load{c: c, group: group, cancel: cancel}
	for w := 0; w < workers; w++ {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				b := Batch(Value(fmt.Sprintf("%s-w%d-%d|", prefix, w, i), valueSize))
				a, err := c.Propose(ctx, group, b)
				ld.mu.Lock()
				if err == nil {
					ld.acked = append(ld.acked, a)
				} else if ctx.Err() == nil {
					ld.errs = append(ld.errs, err)
				}
				ld.mu.Unlock()
			}
		}()
	}
	return ld
}

// Count returns how many proposals were acknowledged so far.
func (ld *Load) Count() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.acked)
}

// WaitCount waits until at least n proposals were acknowledged.
func (ld *Load) WaitCount(ctx context.Context, n int) error {
	for ld.Count() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("load reached %d of %d acks: %w", ld.Count(), n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Stop stops the proposers and returns the acknowledged proposals and any
// unexpected errors.
func (ld *Load) Stop() ([]Acked, []error) {
	ld.cancel()
	ld.wg.Wait()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return slices.Clone(ld.acked), slices.Clone(ld.errs)
}
