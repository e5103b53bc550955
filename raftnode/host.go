package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/storage"
)

// Log is a group's storage as the production driver uses it; *storage.Log
// satisfies it.
type Log interface {
	Storage
	Write(ents []*raftpb.Entry, hs *raftpb.HardState) error
	Sync() (storage.Synced, error)
	SetApplied(index uint64)
	ApplyConfState(index uint64, cs *raftpb.ConfState) error
	DeleteBefore(offset int64) (int, error)
	// InstallSnapshot replaces the log with the one the snapshot stands
	// for, copying its entries from src; durable on return.
	InstallSnapshot(snap *raftpb.Snapshot, src storage.EntrySource) error
}

// EntryFetcher copies entries [from, to] of a group's log from a peer
// (a leader that sent a snapshot). It may return fewer entries than asked.
type EntryFetcher func(group, peer, from, to uint64) ([]*raftpb.Entry, error)

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
	// Fetch copies snapshot entries from peers; Peers lists the replicas to
	// try after the snapshot's sender.
	Fetch  EntryFetcher
	Peers  []uint64
	Logger *slog.Logger
}

// Host is the production driver: it owns a Core on one goroutine, feeds it
// real ticks and peer messages, and carries out its effects with an append
// worker that group-commits (many appends, one fdatasync per log).
type Host struct {
	cfg    HostConfig
	core   *Core
	events chan func()
	work   *workQueue
	log    *slog.Logger

	mu      sync.Mutex
	logs    map[uint64]Log
	futures map[ProposalID]func(Result, error)
	nextID  ProposalID
	status  map[uint64]*groupView
	err     error // set when the host stopped

	stop chan struct{}
	wg   sync.WaitGroup

	// Read fences by group. Rounds start only on the core goroutine; fmu
	// covers the stop path, which finishes them from elsewhere.
	fmu    sync.Mutex
	fences map[uint64]*fenceRound
}

// Completion is the outcome of a proposal submitted with ProposeAsync.
type Completion struct {
	Result Result
	Err    error
}

// groupView is what other goroutines may read about a group without
// entering the core: leader and high watermark, with a channel closed on
// every high watermark change (fetch long polls wait on it).
type groupView struct {
	leader      uint64
	term        uint64
	role        string
	hwm         int64
	applied     uint64
	appliedTerm uint64
	changed     chan struct{}
}

// NewHost returns a started host with no groups.
func NewHost(cfg HostConfig) *Host {
	if cfg.TickInterval == 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Core.Logger == nil {
		cfg.Core.Logger = SlogLogger{L: cfg.Logger}
	}
	h := &Host{
		cfg:     cfg,
		core:    NewCore(cfg.Core),
		events:  make(chan func(), 4096),
		work:    newWorkQueue(),
		log:     cfg.Logger,
		logs:    map[uint64]Log{},
		futures: map[ProposalID]func(Result, error){},
		status:  map[uint64]*groupView{},
		stop:    make(chan struct{}),
		fences:  map[uint64]*fenceRound{},
	}
	h.wg.Add(2)
	go h.runCore()
	go h.runAppends()
	return h
}

// ID returns this server's node id.
func (h *Host) ID() uint64 { return h.cfg.Core.ID }

// Stop stops the host; pending proposals end with ErrStopped (their outcome
// is unknown to callers). Logs are not closed: their owner closes them.
func (h *Host) Stop() {
	h.fail(ErrStopped)
	h.wg.Wait()
}

// Err returns why the host stopped, or nil while it runs.
func (h *Host) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *Host) fail(err error) {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = err
	futures := h.futures
	h.futures = map[ProposalID]func(Result, error){}
	for _, v := range h.status {
		close(v.changed)
		v.changed = make(chan struct{})
	}
	h.mu.Unlock()
	close(h.stop)
	h.work.close()
	for _, done := range futures {
		done(Result{}, err)
	}
}

// do runs f on the core goroutine. It returns ErrStopped if the host stopped.
func (h *Host) do(f func()) error {
	select {
	case h.events <- f:
		return nil
	case <-h.stop:
		return ErrStopped
	}
}

// call runs f on the core goroutine and waits for it.
func (h *Host) call(f func()) error {
	done := make(chan struct{})
	if err := h.do(func() { f(); close(done) }); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-h.stop:
		return ErrStopped
	}
}

// AddGroup starts hosting a group on log.
func (h *Host) AddGroup(id uint64, log Log) error {
	var err error
	if cerr := h.call(func() {
		if err = h.core.AddGroup(id, log); err == nil {
			h.mu.Lock()
			h.logs[id] = log
			h.status[id] = &groupView{changed: make(chan struct{})}
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
		h.core.RemoveGroup(id)
		h.mu.Lock()
		delete(h.logs, id)
		if v, ok := h.status[id]; ok {
			close(v.changed)
			delete(h.status, id)
		}
		h.mu.Unlock()
	})
}

// Step delivers a message from a peer (called by the transport).
func (h *Host) Step(group uint64, m *raftpb.Message) {
	failpoint.Inject("dropFrom", func(val failpoint.Value) {
		failpoints.Hit("raftnode/dropFrom")
		if failpoints.IsPeer(val, m.GetFrom()) {
			failpoint.Return()
		}
	})
	_ = h.do(func() { h.core.Step(group, m) })
}

// ReportUnreachable tells the group that a message to peer was dropped.
func (h *Host) ReportUnreachable(group, peer uint64) {
	_ = h.do(func() { h.core.ReportUnreachable(group, peer) })
}

// ReportSnapshot tells the group whether a snapshot sent to peer arrived.
func (h *Host) ReportSnapshot(group, peer uint64, ok bool) {
	_ = h.do(func() { h.core.ReportSnapshot(group, peer, ok) })
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
// outcome (ErrStopped if the host stops first). done runs on the host's
// core goroutine: it must not block.
func (h *Host) ProposeFunc(group uint64, data []byte, done func(Result, error)) error {
	return h.submit(done, func(id ProposalID) { h.core.Propose(group, id, data) })
}

// ProposeConfChange proposes a membership change and waits for it to apply.
func (h *Host) ProposeConfChange(ctx context.Context, group uint64, cc *raftpb.ConfChangeV2) error {
	ch := make(chan Completion, 1)
	if err := h.submit(func(r Result, err error) { ch <- Completion{r, err} }, func(id ProposalID) { h.core.ProposeConfChange(group, id, cc) }); err != nil {
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

// TransferLeader asks the group's leader to hand over to peer.
func (h *Host) TransferLeader(group, to uint64) error {
	return h.do(func() { h.core.TransferLeader(group, to) })
}

// Campaign starts an election in the group on this server.
func (h *Host) Campaign(group uint64) error {
	return h.do(func() { h.core.Campaign(group) })
}

// Status returns the group's full status (computed on the core goroutine).
func (h *Host) Status(group uint64) (GroupStatus, bool) {
	var s GroupStatus
	var ok bool
	if err := h.call(func() { s, ok = h.core.Status(group) }); err != nil {
		return GroupStatus{}, false
	}
	return s, ok
}

// Groups returns the hosted group ids, sorted.
func (h *Host) Groups() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]uint64, 0, len(h.status))
	for id := range h.status {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Leader returns the group's leader as last seen (0: none) and whether this
// server is it.
func (h *Host) Leader(group uint64) (leader uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, found := h.status[group]
	if !found {
		return 0, false
	}
	return v.leader, true
}

// Readable reports whether this server leads the group and may serve reads:
// it has applied an entry of its own term, so its high watermark covers
// everything any earlier leader acknowledged.
func (h *Host) Readable(group uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.status[group]
	return ok && v.leader == h.cfg.Core.ID && v.appliedTerm == v.term && v.term != 0
}

// HighWatermark returns the group's committed, locally durable end offset
// and a channel closed when it next changes (or leadership changes).
func (h *Host) HighWatermark(group uint64) (int64, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.status[group]
	if !ok {
		return 0, nil, false
	}
	return v.hwm, v.changed, true
}

func (h *Host) runCore() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.core.Tick()
		case f := <-h.events:
			f()
			// Take what else is queued before dispatching, so one round of
			// effects covers many events (fewer, larger appends).
			for n := 0; n < 256; n++ {
				select {
				case f = <-h.events:
					f()
					continue
				default:
				}
				break
			}
		}
		// Dispatching can cause more effects (a read fence round starting,
		// say); carry them out now rather than at the next event.
		for fx := h.core.TakeEffects(); len(fx) > 0; fx = h.core.TakeEffects() {
			h.dispatch(fx)
		}
	}
}

func (h *Host) dispatch(effects []Effect) {
	for _, e := range effects {
		switch e := e.(type) {
		case Send:
			if e.Msg.GetType() == raftpb.MsgSnap {
				failpoint.Inject("beforeSnapshotSend", func(val failpoint.Value) {
					failpoints.Hit("raftnode/beforeSnapshotSend")
					if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
						// As a failed snapshot transfer: raft retries later.
						h.core.ReportSnapshot(e.Group, e.Msg.GetTo(), false)
						failpoint.Continue()
					}
				})
			}
			if isLeaderMsg(e.Msg.GetType()) {
				failpoint.Inject("beforeLeaderSend", func(val failpoint.Value) {
					failpoints.Hit("raftnode/beforeLeaderSend")
					if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
						failpoint.Continue()
					}
				})
			} else if isFollowerMsg(e.Msg.GetType()) {
				failpoint.Inject("beforeFollowerSend", func(val failpoint.Value) {
					failpoints.Hit("raftnode/beforeFollowerSend")
					if failpoints.Bool(val) || failpoints.IsPeer(val, e.Msg.GetTo()) {
						failpoint.Continue()
					}
				})
			}
			failpoint.Inject("dropTo", func(val failpoint.Value) {
				failpoints.Hit("raftnode/dropTo")
				if failpoints.IsPeer(val, e.Msg.GetTo()) {
					failpoint.Continue()
				}
			})
			h.cfg.Sender.Send(e.Group, e.Msg)
		case Append, SaveConfState, Retain:
			h.work.push(e)
		case Applied:
			failpoint.Inject("beforeApply", func(val failpoint.Value) {
				failpoints.Hit("raftnode/beforeApply")
				if failpoints.Bool(val) {
					failpoints.Crash()
				}
			})
			h.work.push(e) // applied index is persisted after earlier conf states
			h.publishApplied(e)
			h.fenceApplied(e.Group, e.Index)
			failpoint.Inject("afterApply", func(val failpoint.Value) {
				failpoints.Hit("raftnode/afterApply")
				if failpoints.Bool(val) {
					failpoints.Crash()
				}
			})
		case Complete:
			h.complete(e)
		case LeaderChanged:
			h.mu.Lock()
			if v, ok := h.status[e.Group]; ok {
				v.leader, v.term, v.role = e.Leader, e.Term, e.Role
				close(v.changed) // waiters re-check leadership too
				v.changed = make(chan struct{})
			}
			h.mu.Unlock()
		}
	}
}

// isLeaderMsg reports the messages only a leader sends (log replication,
// heartbeats, snapshots, leadership transfer).
func isLeaderMsg(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgTimeoutNow:
		return true
	}
	return false
}

// isFollowerMsg reports a follower's answers to its leader.
func isFollowerMsg(t raftpb.MessageType) bool {
	return t == raftpb.MsgAppResp || t == raftpb.MsgHeartbeatResp
}

func (h *Host) publishApplied(e Applied) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.status[e.Group]; ok {
		v.applied = e.Index
		if v.hwm != e.HighWatermark || v.appliedTerm != e.Term {
			v.hwm, v.appliedTerm = e.HighWatermark, e.Term
			close(v.changed)
			v.changed = make(chan struct{})
		}
	}
}

func (h *Host) complete(e Complete) {
	h.mu.Lock()
	done, ok := h.futures[e.ID]
	delete(h.futures, e.ID)
	h.mu.Unlock()
	if !ok {
		return
	}
	done(Result{Index: e.Index, BaseOffset: e.BaseOffset, NextOffset: e.NextOffset}, e.Err)
}

// runAppends is the append worker: it takes every queued effect, writes all
// appends, syncs each touched log once, and only then reports them done.
func (h *Host) runAppends() {
	defer h.wg.Done()
	// The writer (this goroutine) and the syncer overlap: while the syncer
	// fsyncs one batch, the writer encodes and writes the next. At most one
	// written batch waits for the syncer.
	jobs := make(chan syncJob, 1)
	synced := make(chan struct{})
	go h.runSyncs(jobs, synced)
	defer func() {
		close(jobs)
		<-synced
	}()
	installing := map[uint64][]Effect{}
	for {
		batch, ok := h.work.takeAll()
		if !ok {
			return
		}
		job, err := h.writeBatch(batch, jobs, installing)
		if err == nil {
			err = h.handOff(jobs, job)
		}
		if err != nil {
			if !errors.Is(err, ErrStopped) {
				h.log.Error("storage failed; stopping so nothing un-durable is acknowledged", "err", err)
				h.fail(fmt.Errorf("%w: %v", ErrStopped, err))
			}
			return
		}
	}
}

// syncJob is a written batch: the logs to fsync, the appends to report
// durable after that, and (for a barrier) a channel to close when done.
type syncJob struct {
	groups  []uint64
	done    []Append
	barrier chan struct{}
}

func (h *Host) handOff(jobs chan<- syncJob, job syncJob) error {
	if len(job.groups) == 0 && len(job.done) == 0 && job.barrier == nil {
		return nil
	}
	select {
	case jobs <- job:
		return nil
	case <-h.stop:
		return ErrStopped
	}
}

// drain hands off what is written so far and waits until every written
// batch is durable and reported.
func (h *Host) drain(jobs chan<- syncJob, job *syncJob) error {
	job.barrier = make(chan struct{})
	if err := h.handOff(jobs, *job); err != nil {
		return err
	}
	select {
	case <-job.barrier:
	case <-h.stop:
		return ErrStopped
	}
	*job = syncJob{}
	return nil
}

// runSyncs fsyncs each written batch's logs once, then reports its appends
// durable, in order.
func (h *Host) runSyncs(jobs <-chan syncJob, synced chan<- struct{}) {
	defer close(synced)
	for job := range jobs {
		for _, g := range job.groups {
			l := h.logOf(g)
			if l == nil {
				continue
			}
			if _, err := l.Sync(); err != nil {
				h.log.Error("storage failed; stopping so nothing un-durable is acknowledged", "group", g, "err", err)
				h.fail(fmt.Errorf("%w: group %d: sync: %v", ErrStopped, g, err))
				return
			}
		}
		if len(job.done) > 0 {
			afterSave()
		}
		for _, a := range job.done {
			_ = h.do(func() { h.core.AppendDone(a.Group, a.Msg) })
		}
		if job.barrier != nil {
			close(job.barrier)
		}
	}
}

// afterSave is the failpoint between making appends durable and telling
// raft so.
func afterSave() {
	failpoint.Inject("afterSave", func(val failpoint.Value) {
		failpoints.Hit("raftnode/afterSave")
		if failpoints.Bool(val) {
			failpoints.Crash()
		}
	})
}

// writeBatch writes a batch of effects in order and returns the sync job
// for what it wrote. An append that truncates the log (a Raft conflict) or
// installs a snapshot first waits until everything written before is
// durable and reported: an acknowledgement sent later must not describe
// entries that a later write already replaced.
//
// A snapshot is installed on a goroutine of its own (copying its entries
// from a peer can take long): the group's later effects wait in
// installing, in order, and the other groups go on being written.
func (h *Host) writeBatch(batch []Effect, jobs chan<- syncJob, installing map[uint64][]Effect) (syncJob, error) {
	var job syncJob
	for len(batch) > 0 {
		e := batch[0]
		batch = batch[1:]
		if g, ok := EffectGroup(e); ok {
			if q, busy := installing[g]; busy {
				installing[g] = append(q, e)
				continue
			}
		}
		switch e := e.(type) {
		case Append:
			l := h.logOf(e.Group)
			if l == nil {
				continue
			}
			if Replaces(l, e.Msg) {
				if err := h.drain(jobs, &job); err != nil {
					return job, err
				}
			}
			failpoint.Inject("beforeSave", func(val failpoint.Value) {
				failpoints.Hit("raftnode/beforeSave")
				if failpoints.Bool(val) {
					failpoints.Crash()
				}
			})
			if e.Msg.GetSnapshot().GetMetadata().GetIndex() != 0 {
				installing[e.Group] = []Effect{}
				h.wg.Add(1)
				go func() {
					defer h.wg.Done()
					h.work.push(installed{append: e, err: h.installSnapshot(l, e)})
				}()
				continue
			}
			if err := WriteAppend(l, e.Msg); err != nil {
				return job, fmt.Errorf("group %d: %w", e.Group, err)
			}
			job.add(e)
		case installed:
			if e.err != nil {
				return job, fmt.Errorf("group %d: install snapshot: %w", e.append.Group, e.err)
			}
			waiting := installing[e.append.Group]
			delete(installing, e.append.Group)
			if l := h.logOf(e.append.Group); l != nil {
				if err := WriteAppend(l, e.append.Msg); err != nil {
					return job, fmt.Errorf("group %d: %w", e.append.Group, err)
				}
				job.add(e.append)
			}
			batch = append(waiting, batch...)
		case SaveConfState:
			if l := h.logOf(e.Group); l != nil {
				if err := l.ApplyConfState(e.Index, e.Conf); err != nil {
					return job, fmt.Errorf("group %d: save conf state: %w", e.Group, err)
				}
			}
		case Retain:
			if l := h.logOf(e.Group); l != nil {
				if n, err := l.DeleteBefore(e.BeforeOffset); err != nil {
					h.log.Warn("retention failed", "group", e.Group, "before", e.BeforeOffset, "err", err)
				} else if n > 0 {
					h.log.Info("retention deleted segments", "group", e.Group, "before", e.BeforeOffset, "segments", n)
				}
			}
		case Applied:
			if l := h.logOf(e.Group); l != nil {
				l.SetApplied(e.Index)
			}
		}
	}
	return job, nil
}

// installed is what a snapshot install goroutine hands back to the append
// worker: the append that carried the snapshot, to finish (its entries and
// hard state) and report, or the install's error.
type installed struct {
	append Append
	err    error
}

func (installed) effect() {}

func (j *syncJob) add(a Append) {
	j.done = append(j.done, a)
	if !slices.Contains(j.groups, a.Group) {
		j.groups = append(j.groups, a.Group)
	}
}

func (h *Host) logOf(group uint64) Log {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs[group]
}

// installSnapshot replaces a log with the snapshot an append carries.
func (h *Host) installSnapshot(l Log, a Append) error {
	failpoint.Inject("beforeSnapshotInstall", func(val failpoint.Value) {
		failpoints.Hit("raftnode/beforeSnapshotInstall")
		if failpoints.Bool(val) {
			failpoints.Crash()
		}
		if failpoints.EIO(val) {
			failpoint.Return(failpoints.IOError())
		}
	})
	return l.InstallSnapshot(a.Msg.GetSnapshot(), h.snapshotSource(a))
}

// snapshotSource copies a snapshot's entries from its sender, falling back
// to the other replicas, and retries with backoff until it succeeds or the
// host stops: the install must finish before raft hears it is done. (The
// group's later writes wait for it; other groups' do not.)
func (h *Host) snapshotSource(a Append) storage.EntrySource {
	return func(from, to uint64) ([]*raftpb.Entry, error) {
		peers := append([]uint64{a.Leader}, h.cfg.Peers...)
		backoff := 50 * time.Millisecond
		for {
			for _, p := range peers {
				if p == 0 || p == h.cfg.Core.ID || h.cfg.Fetch == nil {
					continue
				}
				ents, err := h.cfg.Fetch(a.Group, p, from, to)
				if err == nil && len(ents) > 0 && ents[0].GetIndex() == from {
					return ents, nil
				}
				h.log.Warn("copying snapshot entries failed; trying another replica", "group", a.Group, "peer", p, "from", from, "err", err)
			}
			select {
			case <-h.stop:
				return nil, ErrStopped
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// workQueue is an unbounded FIFO between the core and the append worker.
// Unbounded is safe: the core only emits appends for proposals it admitted
// under MaxUncommittedBytes and for messages raft bounds by inflight limits.
type workQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []Effect
	closed bool
}

func newWorkQueue() *workQueue {
	q := &workQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *workQueue) push(e Effect) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *workQueue) takeAll() ([]Effect, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil, false
	}
	items := q.items
	q.items = nil
	return items, true
}

func (q *workQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
