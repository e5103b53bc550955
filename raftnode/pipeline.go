package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/canary"
	"github.com/vdl-project/vdl/storage"
)

// The storage pipeline decides how a server's storage effects (appends,
// conf states, retention, applied indexes) become writes and fsyncs, and
// when raft hears that an append is durable. It is production policy: the
// Host runs its jobs on a writer and a syncer goroutine, the simulator on
// simulated time.
//
//   - The writer takes everything queued and writes it as one WriteJob.
//   - The syncer fsyncs each written job's logs once; only then are the
//     job's appends reported durable (Core.AppendDone), job after job, in
//     order.
//   - While the syncer fsyncs job N, job N+1 may wait for it and the writer
//     may write N+2, then waits holding it: at most two written jobs are
//     not yet durable (syncQueue).
//   - An append that replaces written entries (a conflict truncation) or
//     installs a snapshot waits until everything written before is durable
//     and reported: an acknowledgement sent later must not describe
//     entries that a later write already replaced.
//   - A snapshot is installed off the writer (install.go): the group's
//     later effects wait in order, other groups go on being written.
type pipeline struct {
	queue      []Effect            // not yet handed to the writer
	writing    *WriteJob           // with the writer
	held       *SyncJob            // written, waiting for room at the syncer
	syncing    []*SyncJob          // with the syncer; [0] is being synced
	installing map[uint64][]Effect // groups installing a snapshot: their later effects
	last       map[uint64]uint64   // per group: the last index handed to the writer
}

// syncQueue is how many written jobs may wait behind the one being synced.
const syncQueue = 1

func newPipeline() pipeline {
	return pipeline{installing: map[uint64][]Effect{}, last: map[uint64]uint64{}}
}

// WriteJob is a batch of storage effects to write, in order. A driver runs
// it off the Node's loop and reports Node.Written.
type WriteJob struct {
	items  []writeItem
	logger *slog.Logger
}

type writeItem struct {
	e Effect
	l Log
}

// installed is a snapshot install that finished: the rest of the append
// that carried it (entries, hard state) is written like any append.
type installed struct{ a Append }

func (installed) effect() {}

// Run carries out the writes in order. A write to a log closed meanwhile
// (its group was removed) is skipped.
func (j *WriteJob) Run() error {
	for _, it := range j.items {
		if err := j.run(it); err != nil && !errors.Is(err, storage.ErrClosed) {
			return err
		}
	}
	return nil
}

func (j *WriteJob) run(it writeItem) error {
	switch e := it.e.(type) {
	case Append:
		failpoint.Inject("beforeSave", func(val failpoint.Value) {
			failpoints.Hit("raftnode/beforeSave")
			failpoints.CrashOn(val)
		})
		if err := WriteAppend(it.l, e.Msg); err != nil {
			return fmt.Errorf("group %d: %w", e.Group, err)
		}
	case installed:
		if err := WriteAppend(it.l, e.a.Msg); err != nil {
			return fmt.Errorf("group %d: %w", e.a.Group, err)
		}
	default:
		return j.runState(it)
	}
	return nil
}

// runState carries out the writes that are not appends (membership,
// retention, configs, producer state, the applied index). Kept apart from
// run, whose marker must not change the machine code around it
// (failpointtest/TestMarkersCompileAway).
func (j *WriteJob) runState(it writeItem) error {
	switch e := it.e.(type) {
	case SaveConfState:
		if err := it.l.ApplyConfState(e.Index, e.Conf); err != nil {
			return fmt.Errorf("group %d: save conf state: %w", e.Group, err)
		}
	case Retain:
		// Everything up to the command is applied: record it durably so
		// segments of entries up to here can go now, not only once a
		// later write syncs the applied index.
		it.l.SetApplied(e.Index)
		if _, err := it.l.Sync(); err != nil && !errors.Is(err, storage.ErrClosed) {
			return fmt.Errorf("group %d: retention: %w", e.Group, err)
		}
		n, err := it.l.DeleteBefore(e.BeforeOffset)
		switch {
		case err != nil && !errors.Is(err, storage.ErrClosed):
			j.logger.Warn("retention failed", "group", e.Group, "before", e.BeforeOffset, "err", err)
		case n > 0:
			j.logger.Info("retention deleted segments", "group", e.Group, "before", e.BeforeOffset, "segments", n)
		}
	case SetConfig:
		if err := it.l.ApplyConfig(e.Index, e.Reset, e.Ops); err != nil && !errors.Is(err, storage.ErrClosed) {
			return fmt.Errorf("group %d: config: %w", e.Group, err)
		}
	case SaveProducers:
		if err := it.l.SaveProducerState(e.Index, e.Data); err != nil {
			return fmt.Errorf("group %d: save producer state: %w", e.Group, err)
		}
	case Applied:
		it.l.SetApplied(e.Index)
	}
	return nil
}

// syncJob returns the job that makes what j wrote durable, or nil when
// nothing needs it.
func (j *WriteJob) syncJob() *SyncJob {
	s := &SyncJob{}
	seen := map[Log]bool{} // a job can hold thousands of groups' appends (an election storm)
	for _, it := range j.items {
		var a Append
		switch e := it.e.(type) {
		case Append:
			a = e
		case installed:
			a = e.a
		default:
			continue
		}
		s.done = append(s.done, a)
		if !durable(a.Msg) {
			continue // nothing written: its responses (a pre-vote's) need no fsync, only their turn
		}
		if !seen[it.l] {
			seen[it.l] = true
			s.logs = append(s.logs, it.l)
		}
	}
	if len(s.done) == 0 {
		return nil
	}
	return s
}

// durable reports whether an append writes anything: entries, a hard
// state or a snapshot. raft sends pre-vote answers through empty appends,
// thousands at a time when every group of a server campaigns; an fsync
// each (even of a clean file, a device flush on ext4) held every later
// vote behind them for seconds.
func durable(m *raftpb.Message) bool {
	return len(m.GetEntries()) > 0 || m.Term != nil || m.Vote != nil || m.Commit != nil ||
		m.GetSnapshot().GetMetadata().GetIndex() != 0
}

// SyncJob makes a written job's logs durable. A driver runs it off the
// Node's loop and reports Node.Synced; the job's appends are reported
// durable to raft only then.
type SyncJob struct {
	logs []Log
	done []Append
}

// Logs is how many logs the job fsyncs: what it costs the disk.
func (j *SyncJob) Logs() int { return len(j.logs) }

// Run fsyncs each log once, one after the other. A log closed meanwhile
// is skipped.
func (j *SyncJob) Run() error { return j.RunConcurrently(1) }

// RunConcurrently is Run with up to n fsyncs at once: a job holding many
// groups' appends (thousands of votes when every group of a server elects
// at once) takes one fsync's time per n logs instead of per log, and the
// file system can commit concurrent fsyncs together. The simulator runs
// jobs with Run (one goroutine, reproducible); the Host with n > 1.
func (j *SyncJob) RunConcurrently(n int) error {
	if canary.On(canary.HardStateNotSynced) && !slices.ContainsFunc(j.done, func(a Append) bool {
		return len(a.Msg.GetEntries()) > 0 || a.Msg.GetSnapshot() != nil
	}) {
		return nil // broken on purpose: a hard state alone (a vote, a term) is not synced
	}
	syncLog := func(l Log) error {
		if _, err := l.Sync(); err != nil && !errors.Is(err, storage.ErrClosed) {
			return fmt.Errorf("sync: %w", err)
		}
		return nil
	}
	if n <= 1 || len(j.logs) == 1 {
		for _, l := range j.logs {
			if err := syncLog(l); err != nil {
				return err
			}
		}
		afterSave()
		return nil
	}
	errs := make([]error, len(j.logs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, len(j.logs)) {
		wg.Go(func() {
			for k := range next {
				errs[k] = syncLog(j.logs[k])
			}
		})
	}
	for k := range j.logs {
		next <- k
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	afterSave()
	return nil
}

// afterSave is the failpoint between making appends durable and telling
// raft so.
func afterSave() {
	failpoint.Inject("afterSave", func(val failpoint.Value) {
		failpoints.Hit("raftnode/afterSave")
		failpoints.CrashOn(val)
	})
}

// kick hands the writer its next job if it is free.
func (n *Node) kick() {
	p := &n.pipe
	if n.err != nil || p.writing != nil || p.held != nil || len(p.queue) == 0 {
		return
	}
	if j := n.nextWrite(); j != nil {
		p.writing = j
		n.d.Write(j)
	}
}

// nextWrite takes the queued effects that can be written now: everything
// up to an append that must wait for a drain. Snapshot installs start here.
func (n *Node) nextWrite() *WriteJob {
	p := &n.pipe
	j := &WriteJob{logger: n.log}
	for len(p.queue) > 0 {
		e := p.queue[0]
		if in, ok := e.(installed); ok {
			p.queue = p.queue[1:]
			j.items = append(j.items, writeItem{e: in, l: n.logs[in.a.Group]})
			continue
		}
		g, _ := EffectGroup(e)
		if q, busy := p.installing[g]; busy {
			p.installing[g] = append(q, e)
			p.queue = p.queue[1:]
			continue
		}
		l := n.logs[g]
		if l == nil { // the group was removed
			p.queue = p.queue[1:]
			continue
		}
		if a, ok := e.(Append); ok && p.replaces(a) {
			if len(j.items) > 0 || len(p.syncing) > 0 {
				break // drain: write it once everything before is reported
			}
			if a.Msg.GetSnapshot().GetMetadata().GetIndex() != 0 {
				p.queue = p.queue[1:]
				p.installing[g] = []Effect{}
				n.handed(a)
				n.startInstall(a)
				continue
			}
		}
		p.queue = p.queue[1:]
		if a, ok := e.(Append); ok {
			if ents := a.Msg.GetEntries(); len(ents) > 0 {
				p.last[g] = ents[len(ents)-1].GetIndex()
			}
		}
		n.handed(e)
		j.items = append(j.items, writeItem{e: e, l: l})
	}
	if len(j.items) == 0 {
		return nil
	}
	return j
}

// replaces reports whether writing a replaces entries already handed to
// the writer (a conflict truncation) or the whole log (a snapshot).
func (p *pipeline) replaces(a Append) bool {
	if a.Msg.GetSnapshot().GetMetadata().GetIndex() != 0 {
		return true
	}
	ents := a.Msg.GetEntries()
	return len(ents) > 0 && ents[0].GetIndex() <= p.last[a.Group]
}

// Written reports that the writer finished j.
func (n *Node) Written(j *WriteJob, err error) {
	p := &n.pipe
	if n.err != nil || p.writing != j {
		return
	}
	p.writing = nil
	if err != nil {
		n.failStop(err)
		return
	}
	for _, it := range j.items {
		if e, ok := it.e.(SaveConfState); ok {
			n.confWritten(e)
		}
	}
	s := j.syncJob()
	if s == nil {
		return
	}
	if canary.On(canary.AckBeforeFsync) {
		for _, a := range s.done { // broken on purpose: durable before the fsync
			n.appendDone(a)
		}
		s.done = nil
	}
	if len(p.syncing) > syncQueue {
		p.held = s
		return
	}
	p.syncing = append(p.syncing, s)
	if len(p.syncing) == 1 {
		n.d.Sync(s)
	}
}

// Synced reports that the syncer made j durable: its appends are reported
// to raft, in order.
func (n *Node) Synced(j *SyncJob, err error) {
	p := &n.pipe
	if n.err != nil || len(p.syncing) == 0 || p.syncing[0] != j {
		return
	}
	if err != nil {
		n.failStop(err)
		return
	}
	p.syncing = p.syncing[1:]
	for _, a := range j.done {
		n.appendDone(a)
	}
	if p.held != nil {
		p.syncing = append(p.syncing, p.held)
		p.held = nil
	}
	if len(p.syncing) > 0 {
		n.d.Sync(p.syncing[0])
	}
}

// lastIndex is a log's last index (0 if it cannot say).
func lastIndex(l Log) uint64 {
	last, err := l.LastIndex()
	if err != nil {
		return 0
	}
	return last
}
