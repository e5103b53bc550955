package raftnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/storage"
)

// Log is a group's storage as a Node uses it; *storage.Log satisfies it.
type Log interface {
	Storage
	Write(ents []*raftpb.Entry, hs *raftpb.HardState) error
	Sync() (storage.Synced, error)
	SetApplied(index uint64)
	ApplyConfState(index uint64, cs *raftpb.ConfState) error
	DeleteBefore(offset int64) (int, error)
	// ApplyConfig applies a committed config command; durable on return.
	ApplyConfig(index uint64, reset bool, ops []storage.ConfigOp) error
	// SaveProducerState durably replaces the saved producer state.
	SaveProducerState(index uint64, data []byte) error
	// InstallSnapshot replaces the log with the one the snapshot stands
	// for, copying its entries from src; durable on return.
	InstallSnapshot(snap *raftpb.Snapshot, src storage.EntrySource) error
}

// Sender delivers messages to peers (the TCP transport). Send must not block.
type Sender interface {
	Send(group uint64, m *raftpb.Message)
}

// ErrStopped: the host is stopped (shut down, or a disk write failed and it
// stopped rather than acknowledge data that might not be durable).
var ErrStopped = errors.New("raftnode: host stopped")

// Result is the outcome of a committed proposal.
type Result struct {
	Index      uint64
	BaseOffset int64
	NextOffset int64
}

// HostConfig configures the production driver.
type HostConfig struct {
	Core         Config
	TickInterval time.Duration // default 100ms
	Sender       Sender
	// Fetch copies snapshot entries from peers (the group's replicas are
	// tried in turn, the snapshot's sender first).
	Fetch EntryFetcher
	// CatchupBytesPerSec bounds the catch-up of learners (a replica a
	// move adds): the appends the leader sends them
	// (Core.LearnerBytesPerTick, derived from it unless set) and the
	// entries this server's snapshot installs copy (PacedFetch). 0: none.
	CatchupBytesPerSec int64
	Logger             *slog.Logger
	// OnMembership: see NodeConfig.
	OnMembership func(group uint64, cs *raftpb.ConfState, context []byte)
	// ObserveWrite and ObserveSync, if set, are told how long each write
	// job and each sync job (one fdatasync per log it wrote) took, on the
	// writer's and the syncer's goroutine (metrics); ObserveCommit how long
	// each successful proposal took from submission to its completion
	// (committed and applied here), on the loop.
	ObserveWrite, ObserveSync, ObserveCommit func(time.Duration)
	// ObserveRoundTrip, if set, is told each append's round trip from
	// this server, leading, to a follower and back; ObserveDurable how
	// long each append from a leader took to be acknowledged here (made
	// durable). Both on the loop (host_appends.go).
	ObserveRoundTrip func(peer uint64, d time.Duration)
	ObserveDurable   func(time.Duration)
	// ObserveInstall, if set, is told each snapshot install's outcome.
	ObserveInstall func(err error)
}

// Host is the production driver of a Node: one goroutine (the loop) owns
// the Node and feeds it real ticks, peer messages and proposals; a writer
// and a syncer goroutine run its storage jobs (many appends per write, one
// fdatasync per log per job), and each snapshot install attempt runs on a
// goroutine of its own. What to write, when to fsync, when raft hears an
// append is durable, when a read may be served: the Node decides, the Host
// only carries it out.
type Host struct {
	cfg    HostConfig
	node   *Node // the loop's
	events chan func()
	writes chan *WriteJob
	syncs  chan *SyncJob
	log    *slog.Logger
	// appends times appends to and from peers (nil: not observed); the
	// loop's.
	appends *appendClock

	// gate makes every event submitted run exactly once: do holds it
	// shared while queueing; Stop closes it before the loop ends, and the
	// loop runs what was queued before that.
	gate   sync.RWMutex
	closed bool

	mu      sync.Mutex
	futures map[ProposalID]func(Result, error)
	nextID  ProposalID
	views   map[uint64]*groupView
	err     error         // why the host stopped
	failed  chan struct{} // closed when the node fail-stopped

	// unreachable collects delivery failures until the loop takes them
	// all in one event: a peer that went down fails a message of every
	// group that sends to it, every tick.
	unreachMu   sync.Mutex
	unreachable map[[2]uint64]struct{} // {group, peer}

	quit     chan struct{}
	stopOnce sync.Once
	loopDone sync.WaitGroup
	workers  sync.WaitGroup
}

// groupView is a group's View for readers on other goroutines, with a
// channel closed on every change that concerns them (fetch long polls wait
// on it).
type groupView struct {
	View
	changed chan struct{}
}

// Completion is the outcome of a proposal submitted with ProposeAsync.
type Completion struct {
	Result Result
	Err    error
}

// NewHost returns a started host with no groups.
func NewHost(cfg HostConfig) *Host {
	if cfg.TickInterval == 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Fetch == nil {
		cfg.Fetch = func(_, peer, _, _ uint64) ([]*raftpb.Entry, uint64, error) {
			return nil, 0, fmt.Errorf("no way to copy entries from node %d", peer)
		}
	}
	quit := make(chan struct{})
	if r := cfg.CatchupBytesPerSec; r > 0 {
		if cfg.Core.LearnerBytesPerTick == 0 {
			cfg.Core.LearnerBytesPerTick = max(1, int64(float64(r)*cfg.TickInterval.Seconds()))
		}
		cfg.Fetch = PacedFetch(cfg.Fetch, r, time.Now, func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-quit:
				return false
			}
		})
	}
	h := &Host{
		cfg:     cfg,
		events:  make(chan func(), 4096),
		writes:  make(chan *WriteJob, 1),
		syncs:   make(chan *SyncJob, 1),
		log:     cfg.Logger,
		futures: map[ProposalID]func(Result, error){},
		views:   map[uint64]*groupView{},
		failed:  make(chan struct{}),
		quit:    quit,
	}
	if cfg.ObserveRoundTrip != nil || cfg.ObserveDurable != nil {
		h.appends = newAppendClock(cfg.ObserveRoundTrip, cfg.ObserveDurable)
	}
	h.node = NewNode(NodeConfig{Core: cfg.Core, Logger: cfg.Logger, OnMembership: cfg.OnMembership}, hostDriver{h})
	h.loopDone.Add(1)
	go h.run()
	h.workers.Add(2)
	go h.runWrites()
	go h.runSyncs()
	return h
}

// ID returns this server's node id.
func (h *Host) ID() uint64 { return h.cfg.Core.ID }

// Stop stops the host: pending proposals end with ErrStopped (their
// outcome is unknown to callers). Logs are not closed: their owner closes
// them.
func (h *Host) Stop() {
	h.stopOnce.Do(func() {
		_ = h.call(func() { h.node.Stop(ErrStopped) })
		closed := make(chan struct{})
		go func() {
			h.gate.Lock() // waits for callers blocked on a full queue: the loop still drains it
			h.closed = true
			h.gate.Unlock()
			close(closed)
		}()
		<-closed
		close(h.quit)
		h.loopDone.Wait()
		close(h.writes)
		close(h.syncs)
		h.workers.Wait()
		h.fail(ErrStopped)
	})
}

// Err returns why the host stopped, or nil while it runs.
func (h *Host) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Failed is closed when the host stopped on a failure (storage, a raft
// invariant): the process must exit; a supervisor restarts it.
func (h *Host) Failed() <-chan struct{} { return h.failed }

// fail records why the host stopped and ends every pending proposal.
func (h *Host) fail(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	futures := h.futures
	h.futures = map[ProposalID]func(Result, error){}
	h.mu.Unlock()
	for _, id := range sortedIDs(futures) {
		futures[id](Result{}, err)
	}
}

// do runs f on the loop. It returns ErrStopped if the host is stopped.
func (h *Host) do(f func()) error {
	h.gate.RLock()
	defer h.gate.RUnlock()
	if h.closed {
		return ErrStopped
	}
	h.events <- f
	return nil
}

// call runs f on the loop and waits for it.
func (h *Host) call(f func()) error {
	done := make(chan struct{})
	if err := h.do(func() { f(); close(done) }); err != nil {
		return err
	}
	<-done
	return nil
}

// run is the loop: ticks and events into the Node, then its effects out.
func (h *Host) run() {
	defer h.loopDone.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			for { // what was queued before the gate closed
				select {
				case f := <-h.events:
					h.guard(f)
				default:
					return
				}
			}
		case <-t.C:
			h.guard(h.node.Tick)
		case f := <-h.events:
			h.guard(f)
			// Take what else is queued before flushing, so one round of
			// effects covers many events (fewer, larger appends).
			for n := 0; n < 256; n++ {
				select {
				case f = <-h.events:
					h.guard(f)
					continue
				default:
				}
				break
			}
		}
		h.guard(h.node.Flush)
	}
}

// guard runs f on the loop; a panic (a raft invariant) fail-stops the
// node instead of leaving it half-updated.
func (h *Host) guard(f func()) {
	defer func() {
		if p := recover(); p != nil {
			h.node.FailStop(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
		}
	}()
	f()
}

// AddGroup starts hosting a group on log.
func (h *Host) AddGroup(id uint64, log Log) error {
	var err error
	if cerr := h.call(func() {
		if err = h.node.AddGroup(id, log); err == nil {
			h.mu.Lock()
			h.views[id] = &groupView{changed: make(chan struct{})}
			h.mu.Unlock()
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// RemoveGroup stops hosting a group.
func (h *Host) RemoveGroup(id uint64) error {
	return h.call(func() {
		h.node.RemoveGroup(id)
		if h.appends != nil {
			h.appends.forget(id)
		}
		h.mu.Lock()
		if v, ok := h.views[id]; ok {
			close(v.changed)
			delete(h.views, id)
		}
		h.mu.Unlock()
	})
}

// Step delivers a message from a peer (called by the transport). It is
// never inlined, marker or not, so the production build's machine code is
// the same with and without the dropFrom marker (TestMarkersCompileAway).
//
//go:noinline
func (h *Host) Step(group uint64, m *raftpb.Message) {
	failpoint.Inject("dropFrom", func(val failpoint.Value) {
		failpoints.Hit("raftnode/dropFrom")
		if failpoints.IsPeer(val, m.GetFrom()) {
			failpoint.Return()
		}
	})
	if c := h.appends; c != nil && clocked(m) {
		at := time.Now() // its arrival, not its turn on the loop
		_ = h.do(func() {
			if h.hosts(group) { // a peer's message for any group id must not grow the clock
				c.received(group, m, at)
			}
			h.node.Step(group, m)
		})
		return
	}
	_ = h.do(func() { h.node.Step(group, m) })
}

// ReportUnreachable tells the group that a message to peer was dropped.
// Reports made while the loop is busy reach it together, once each.
func (h *Host) ReportUnreachable(group, peer uint64) {
	h.unreachMu.Lock()
	first := len(h.unreachable) == 0
	if h.unreachable == nil {
		h.unreachable = map[[2]uint64]struct{}{}
	}
	h.unreachable[[2]uint64{group, peer}] = struct{}{}
	h.unreachMu.Unlock()
	if first {
		_ = h.do(h.reportUnreachable)
	}
}

// reportUnreachable hands the collected delivery failures to the node, in
// group order (on the loop).
func (h *Host) reportUnreachable() {
	h.unreachMu.Lock()
	reports := make([][2]uint64, 0, len(h.unreachable))
	for r := range h.unreachable {
		reports = append(reports, r)
	}
	clear(h.unreachable)
	h.unreachMu.Unlock()
	slices.SortFunc(reports, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, r := range reports {
		h.node.ReportUnreachable(r[0], r[1])
	}
}

// ReportSnapshot tells the group whether a snapshot sent to peer arrived.
func (h *Host) ReportSnapshot(group, peer uint64, ok bool) {
	_ = h.do(func() { h.node.ReportSnapshot(group, peer, ok) })
}

// Propose proposes data and waits for the outcome. Proposals submitted one
// after another from one goroutine are ordered in the log in that order.
// If ctx ends first the outcome is unknown and ctx's error is returned.
func (h *Host) Propose(ctx context.Context, group uint64, data []byte) (Result, error) {
	ch, err := h.ProposeAsync(group, data)
	if err != nil {
		return Result{}, err
	}
	select {
	case c := <-ch:
		return c.Result, c.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// ProposeAsync submits a proposal and returns the channel its outcome will
// arrive on (exactly once; ErrStopped if the host stops first).
func (h *Host) ProposeAsync(group uint64, data []byte) (<-chan Completion, error) {
	ch := make(chan Completion, 1)
	err := h.ProposeFunc(group, data, func(r Result, err error) { ch <- Completion{r, err} })
	return ch, err
}

// ProposeFunc submits a proposal; done is called exactly once with its
// outcome (ErrStopped if the host stops first) unless ProposeFunc returns
// an error. done runs on the host's loop: it must not block.
func (h *Host) ProposeFunc(group uint64, data []byte, done func(Result, error)) error {
	return h.submit(done, func(id ProposalID) { h.node.Propose(group, id, data) })
}

// ProposeRecordsFunc proposes the user entry data of validated v2 batches
// taking offsets offsets, in chain (Core.ProposeRecords); done as for
// ProposeFunc.
func (h *Host) ProposeRecordsFunc(group uint64, data []byte, offsets int64, chain Chain, done func(Result, error)) error {
	return h.submit(done, func(id ProposalID) { h.node.ProposeRecords(group, id, data, offsets, chain) })
}

// EndChain forgets a chain whose connection closed (Chain).
func (h *Host) EndChain(chain Chain) { _ = h.do(func() { h.node.EndChain(chain) }) }

// ProposeConfChange proposes a membership change and waits for it to apply.
func (h *Host) ProposeConfChange(ctx context.Context, group uint64, cc *raftpb.ConfChangeV2) error {
	ch := make(chan Completion, 1)
	if err := h.submit(func(r Result, err error) { ch <- Completion{r, err} }, func(id ProposalID) { h.node.ProposeConfChange(group, id, cc) }); err != nil {
		return err
	}
	select {
	case c := <-ch:
		return c.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Host) submit(done func(Result, error), f func(ProposalID)) error {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return h.err
	}
	h.nextID++
	id := h.nextID
	if observe := h.cfg.ObserveCommit; observe != nil {
		start, inner := time.Now(), done
		done = func(r Result, err error) {
			if err == nil {
				observe(time.Since(start))
			}
			inner(r, err)
		}
	}
	h.futures[id] = done
	h.mu.Unlock()
	if err := h.do(func() { f(id) }); err != nil {
		h.mu.Lock()
		_, pending := h.futures[id]
		delete(h.futures, id)
		h.mu.Unlock()
		if pending { // else fail() already called done
			return err
		}
	}
	return nil
}

// SetDiskFull says whether the server is short of disk space (user
// proposals are refused meanwhile).
func (h *Host) SetDiskFull(full bool) {
	_ = h.do(func() { h.node.SetDiskFull(full) })
}

// TransferLeader asks the group's leader to hand over to peer.
func (h *Host) TransferLeader(group, to uint64) error {
	return h.do(func() { h.node.TransferLeader(group, to) })
}

// Hello makes the groups that know no leader say hello to their
// replicas: a server calls it once its peer transport is up.
func (h *Host) Hello() error {
	return h.do(h.node.Hello)
}

// Campaign starts an election in the group on this server.
func (h *Host) Campaign(group uint64) error {
	return h.do(func() { h.node.Campaign(group) })
}

// Fence starts (or joins) a confirmation of leadership for a read of group.
func (h *Host) Fence(group uint64) *Fence {
	f := NewFence()
	if err := h.do(func() { h.node.Fence(group, f) }); err != nil {
		f.Finish(err)
	}
	return f
}

// FailStop stops the host for a failure found outside it (corruption found
// by a read): Failed closes and the process must exit.
func (h *Host) FailStop(err error) {
	_ = h.do(func() { h.node.FailStop(err) })
}

// Durable returns, per hosted group, what the node has told raft its log
// holds on disk (Durable), as of now on the loop.
func (h *Host) Durable() (map[uint64]Durable, error) {
	out := map[uint64]Durable{}
	err := h.call(func() {
		for _, g := range h.node.Groups() {
			if d, ok := h.node.Durable(g); ok {
				out[g] = d
			}
		}
	})
	return out, err
}
