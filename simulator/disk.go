package simulator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// The append worker, modelled on raftnode.Host (runAppends, writeBatch,
// runSyncs) in simulated time:
//
//   - the writer takes everything queued, writes it (20-300 µs), and hands
//     the batch to the syncer as a sync job;
//   - the syncer fsyncs each job's logs (the disk's latency) and then
//     reports the job's appends with AppendDone, job after job, in order;
//   - the hand-off is the Host's channel of capacity 1: while the syncer
//     fsyncs job N, job N+1 may wait in the channel and the writer may write
//     N+2, then waits (holding it) until the channel has room;
//   - an append that replaces written entries (a conflict truncation) or
//     installs a snapshot first drains: it hands off what is written so far
//     with a barrier and waits until that job is durable and reported;
//   - a snapshot is installed off the writer (the Host's install goroutine):
//     the copy takes simulated time, the group's later effects queue behind
//     it in order, other groups go on being written; when the copy is done
//     the rest of the append (entries, hard state) is written by the writer
//     and reported with the next sync.
type diskWorker struct {
	work []raftnode.Effect // queued for the writer (the Host's workQueue)

	state   writerState
	rest    []raftnode.Effect // the batch to resume after a drain or hand-off
	drained bool              // rest[0] has drained already
	held    syncJob           // written, waiting for room in the hand-off (writerHandOff)

	jobs []syncJob // handed to the syncer; jobs[0] is being fsynced

	installing map[uint64][]raftnode.Effect // group -> effects waiting for its install
}

type writerState int

const (
	writerIdle     writerState = iota
	writerWriting              // a write event is scheduled
	writerHandOff              // holding a written job until the syncer has room
	writerDraining             // waiting for a barrier job to be reported
)

// syncQueue is the capacity of the Host's hand-off channel.
const syncQueue = 1

// syncJob is a written batch: the logs to fsync, the appends to report
// after that, and whether the writer waits for it (a drain).
type syncJob struct {
	groups  []uint64
	done    []raftnode.Append
	barrier bool
}

func (j *syncJob) add(a raftnode.Append) {
	j.done = append(j.done, a)
	if !slices.Contains(j.groups, a.Group) {
		j.groups = append(j.groups, a.Group)
	}
}

func (j *syncJob) empty() bool { return len(j.groups) == 0 && len(j.done) == 0 && !j.barrier }

// installed is what a finished snapshot copy hands back to the writer (the
// Host's installed): the append that carried the snapshot, to finish, or
// the install's error. It embeds the Append only to be an Effect.
type installed struct {
	raftnode.Append
	err error
}

func newDiskWorker() diskWorker {
	return diskWorker{installing: map[uint64][]raftnode.Effect{}}
}

// kick starts the writer if it is idle and there is work.
func (n *node) kick() {
	d := &n.disk
	if d.state != writerIdle || len(d.work) == 0 {
		return
	}
	d.state = writerWriting
	n.s.w.after(durn(n.diskR, 20*time.Microsecond, 300*time.Microsecond), n, n.write)
}

// write is one step of the writer: resume the interrupted batch, or take
// everything queued, and write it.
func (n *node) write() {
	d := &n.disk
	batch, drained := d.rest, d.drained
	d.rest, d.drained = nil, false
	if batch == nil {
		batch, d.work = d.work, nil
	}
	n.writeBatch(batch, drained)
}

// writeBatch writes effects in order (like Host.writeBatch). drained: the
// first effect already drained (the writer is resuming after its drain).
func (n *node) writeBatch(batch []raftnode.Effect, drained bool) {
	d := &n.disk
	var job syncJob
	for first := true; len(batch) > 0; first = false {
		e := batch[0]
		if g, ok := raftnode.EffectGroup(e); ok {
			if q, busy := d.installing[g]; busy {
				d.installing[g] = append(q, e)
				batch = batch[1:]
				continue
			}
		}
		switch e := e.(type) {
		case raftnode.Append:
			l := n.logs[e.Group]
			if !(first && drained) && raftnode.Replaces(l, e.Msg) {
				// Hand off what is written with a barrier; resume at e
				// once everything before it is durable and reported.
				job.barrier = true
				d.rest, d.drained = batch, true
				n.handOff(job)
				return
			}
			batch = batch[1:]
			if e.Msg.GetSnapshot().GetMetadata().GetIndex() != 0 {
				d.installing[e.Group] = []raftnode.Effect{}
				n.startInstall(e)
				continue
			}
			if err := raftnode.WriteAppend(l, e.Msg); err != nil {
				n.failStop(fmt.Errorf("group %d: %w", e.Group, err))
				return
			}
			job.add(e)
		case installed:
			batch = batch[1:]
			if e.err != nil {
				n.failStop(fmt.Errorf("group %d: install snapshot: %w", e.Group, e.err))
				return
			}
			waiting := d.installing[e.Group]
			delete(d.installing, e.Group)
			if err := raftnode.WriteAppend(n.logs[e.Group], e.Msg); err != nil {
				n.failStop(fmt.Errorf("group %d: %w", e.Group, err))
				return
			}
			job.add(e.Append)
			batch = append(waiting, batch...)
		case raftnode.SaveConfState:
			batch = batch[1:]
			if err := n.logs[e.Group].ApplyConfState(e.Index, e.Conf); err != nil {
				n.failStop(fmt.Errorf("group %d: save conf state: %w", e.Group, err))
				return
			}
		case raftnode.Retain:
			batch = batch[1:]
			if k, err := n.logs[e.Group].DeleteBefore(e.BeforeOffset); err != nil {
				n.s.w.record("n%d retention g%d failed: %v", n.id, e.Group, err)
			} else if k > 0 {
				n.s.w.record("n%d retention g%d before %d deleted %d segments", n.id, e.Group, e.BeforeOffset, k)
			}
		case raftnode.Applied:
			batch = batch[1:]
			n.logs[e.Group].SetApplied(e.Index)
		default:
			batch = batch[1:]
		}
	}
	n.handOff(job)
}

// handOff gives a written job to the syncer, or holds it while the syncer
// is busy and its queue is full. A barrier job leaves the writer draining.
func (n *node) handOff(job syncJob) {
	d := &n.disk
	s := n.s
	if job.empty() || len(job.groups) == 0 && len(job.done) == 0 && len(d.jobs) == 0 {
		n.writerNext(false) // nothing written, or a drain with nothing to wait for
		return
	}
	if s.cfg.Canary == CanaryAckBeforeFsync {
		// Broken on purpose: report the appends durable at once and fsync
		// lazily in the background; a drain has nothing to wait for.
		for _, a := range job.done {
			n.core.AppendDone(a.Group, a.Msg)
		}
		groups := job.groups
		s.w.after(durn(n.diskR, 100*time.Millisecond, 500*time.Millisecond), n, func() {
			for _, g := range groups {
				if _, err := n.logs[g].Sync(); err != nil {
					n.failStop(err)
					return
				}
			}
		})
		n.writerNext(false)
		n.route()
		return
	}
	if len(d.jobs) > syncQueue {
		d.held = job
		d.state = writerHandOff
		return
	}
	d.jobs = append(d.jobs, job)
	if len(d.jobs) == 1 {
		n.startSync()
	}
	n.writerNext(job.barrier)
}

// writerNext moves the writer on after a hand-off: wait for the barrier,
// resume the interrupted batch, or take new work.
func (n *node) writerNext(barrier bool) {
	d := &n.disk
	switch {
	case barrier:
		d.state = writerDraining
	case d.rest != nil:
		d.state = writerWriting
		n.s.w.after(durn(n.diskR, 20*time.Microsecond, 300*time.Microsecond), n, n.write)
	default:
		d.state = writerIdle
		n.kick()
	}
}

// startSync fsyncs the first job's logs after the disk's latency.
func (n *node) startSync() {
	s := n.s
	d := durn(n.diskR, 200*time.Microsecond, 2*time.Millisecond)
	switch {
	case s.w.now < n.slowTill:
		d = durn(n.diskR, 30*time.Millisecond, 400*time.Millisecond)
	case s.w.bug.fire(n.diskR, "disk.stall", 0.001):
		d = durn(n.diskR, 500*time.Millisecond, 2*time.Second)
		s.w.fault("buggify-disk-stall", "n%d fsync stalls %v", n.id, d)
	case s.w.bug.fire(n.diskR, "disk.slow-fsync", 0.05):
		d = durn(n.diskR, 20*time.Millisecond, 300*time.Millisecond)
		s.w.faults["buggify-slow-fsync"]++
	}
	s.w.after(d, n, n.synced)
}

// synced is the end of the first job's fsync: sync its logs, report its
// appends, start the next job, and let a waiting writer go on.
func (n *node) synced() {
	d := &n.disk
	job := d.jobs[0]
	for _, g := range job.groups {
		synced, err := n.logs[g].Sync()
		if err != nil {
			n.failStop(fmt.Errorf("group %d: sync: %w", g, err))
			return
		}
		if n.s.cfg.Canary == CanaryAckBeforeCommit {
			n.ackEarly(g, synced.LastIndex)
		}
	}
	for _, a := range job.done {
		n.core.AppendDone(a.Group, a.Msg)
	}
	d.jobs = d.jobs[1:]
	if d.state == writerHandOff {
		held := d.held
		d.held = syncJob{}
		d.jobs = append(d.jobs, held)
		n.writerNext(held.barrier)
	} else if job.barrier && d.state == writerDraining {
		n.writerNext(false)
	}
	if len(d.jobs) > 0 {
		n.startSync()
	}
	n.route()
}

// startInstall copies a snapshot's entries off the writer. The copy takes
// a few ms to a few hundred (BUGGIFY: up to seconds); then the log is
// installed and the append goes back to the writer.
func (n *node) startInstall(a raftnode.Append) {
	s := n.s
	d := durn(n.diskR, 2*time.Millisecond, 20*time.Millisecond)
	if s.w.bug.fire(n.diskR, "disk.slow-snapshot-copy", 0.3) {
		d += durn(n.diskR, 200*time.Millisecond, 1500*time.Millisecond)
		s.w.fault("buggify-slow-snapshot-copy", "n%d snapshot copy of g%d starts after %v", n.id, a.Group, d)
	}
	s.w.after(d, n, func() { n.install(a, 50*time.Millisecond) })
}

// install installs the snapshot, copying its entries from a replica now.
// When no replica can serve them the process stops (a crash part way is a
// state the storage engine must handle anyway) and restarts later; with
// Config.SnapshotRetry it retries with backoff instead, as
// Host.snapshotSource does, the log staying reset meanwhile. Otherwise the
// writing of the copied entries takes time proportional to their number.
func (n *node) install(a raftnode.Append, backoff time.Duration) {
	s := n.s
	copied := 0
	err := n.logs[a.Group].InstallSnapshot(a.Msg.GetSnapshot(), n.snapshotSource(a, &copied))
	if errors.Is(err, errNoSource) && !s.cfg.SnapshotRetry {
		// The simulator's default: stop (a restart gets a fresh snapshot).
		n.failStop(fmt.Errorf("group %d: install snapshot: %w", a.Group, err))
		return
	}
	if errors.Is(err, errNoSource) {
		s.w.record("n%d snapshot copy of g%d failed (%v); retrying in %v", n.id, a.Group, err, backoff)
		s.w.after(backoff, n, func() { n.install(a, min(2*backoff, 2*time.Second)) })
		return
	}
	per := durn(n.diskR, 2*time.Microsecond, 50*time.Microsecond)
	s.w.after(min(time.Duration(copied)*per, 300*time.Millisecond), n, func() {
		n.disk.work = append(n.disk.work, installed{Append: a, err: err})
		n.kick()
	})
}

var errNoSource = errors.New("no replica can serve the snapshot's entries")

// snapshotSource copies a snapshot's entries from its sender, falling back
// to the other replicas this node can reach (as Host.snapshotSource does).
// copied counts the entries.
func (n *node) snapshotSource(a raftnode.Append, copied *int) storage.EntrySource {
	return func(from, to uint64) ([]*raftpb.Entry, error) {
		s := n.s
		peers := []uint64{a.Leader}
		for _, p := range s.nodes {
			peers = append(peers, p.id)
		}
		for _, id := range peers {
			p := s.node(id)
			if p == nil || p == n || p.down || p.paused || s.cut[[2]uint64{p.id, n.id}] > 0 {
				continue
			}
			ents, err := p.logs[a.Group].Entries(from, to+1, 1<<20)
			if err != nil && errors.Is(err, storage.ErrCorrupt) {
				s.w.after(0, nil, func() {
					if !p.down {
						s.detect(p, "snapshot-source", err)
					}
				})
			}
			if err == nil && len(ents) > 0 && ents[0].GetIndex() == from {
				out := make([]*raftpb.Entry, len(ents))
				for i, e := range ents {
					out[i] = proto.Clone(e).(*raftpb.Entry)
				}
				*copied += len(out)
				s.w.record("n%d copies snapshot entries [%d,%d] of g%d from n%d", n.id, from, ents[len(ents)-1].GetIndex(), a.Group, p.id)
				return out, nil
			}
		}
		s.w.faults["snapshot-copy-failed"]++
		return nil, fmt.Errorf("%w: [%d,%d] of group %d", errNoSource, from, to, a.Group)
	}
}
