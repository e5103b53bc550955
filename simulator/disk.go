package simulator

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// The disk model: how long the storage jobs of the production engine
// (raftnode.Node's WriteJob, SyncJob and InstallJob) take on a simulated
// server. What to write and when, and when raft hears an append is
// durable, is the engine's own decision; the simulator only carries the
// jobs out on simulated time, over the simulated disk (vfs.Mem: un-synced
// writes lost at power loss, torn writes, ENOSPC, bit flips) seen through
// a failing device (vfs.ErrorFS: EIO, misdirected writes).
//
//   - A write job takes 20-300 µs and runs at its end.
//   - A sync job takes the disk's fsync latency: 0.2-2 ms; 30-400 ms while
//     the nemesis makes the disk slow; BUGGIFY sites make some fsyncs slow
//     (20-300 ms) or stall (0.5-2 s). That is per raftnode.ConcurrentSyncs
//     logs, as the Host fsyncs them (thousands of votes when every group
//     elects); a job with no log to fsync (only answers waiting their
//     turn) takes no time.
//   - A snapshot install attempt starts after 2-20 ms (BUGGIFY: up to
//     1.5 s more), copies at that instant from the replicas this server
//     can reach, and reports after a time proportional to what it copied.

// simIO is a node as the driver of its raftnode.Node.
type simIO struct{ n *node }

func (d simIO) Send(group uint64, m *raftpb.Message) { d.n.s.sendRaft(d.n, group, m) }

func (d simIO) Write(j *raftnode.WriteJob) {
	n := d.n
	n.s.w.after(durn(n.diskR, 20*time.Microsecond, 300*time.Microsecond), n, func() {
		err := j.Run()
		n.rn.Written(j, err)
		n.flush()
		n.checkLogStart()
		n.watchPromises()
	})
}

func (d simIO) Sync(j *raftnode.SyncJob) {
	n := d.n
	var took time.Duration
	switch logs := j.Logs(); {
	case n.s.cfg.syncPerJob:
		took = n.fsyncLatency()
	case logs > 0:
		took = n.fsyncLatency() * time.Duration((logs+raftnode.ConcurrentSyncs-1)/raftnode.ConcurrentSyncs)
	}
	n.s.w.after(took, n, func() {
		err := j.Run()
		n.rn.Synced(j, err)
		n.flush()
		n.watchPromises()
	})
}

func (n *node) fsyncLatency() time.Duration {
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
	return d
}

func (d simIO) Install(j *raftnode.InstallJob) {
	n := d.n
	s := n.s
	start := durn(n.diskR, 2*time.Millisecond, 20*time.Millisecond)
	if s.w.bug.fire(n.diskR, "disk.slow-snapshot-copy", 0.3) {
		start += durn(n.diskR, 200*time.Millisecond, 1500*time.Millisecond)
		s.w.fault("buggify-slow-snapshot-copy", "n%d snapshot copy of g%d starts after %v", n.id, j.Group, start)
	}
	s.w.after(start, n, func() {
		err := j.Run(n.fetchEntries)
		switch {
		case errors.Is(err, raftnode.ErrSnapshotGone):
			s.w.faults["snapshot-gone-everywhere"]++
		case err != nil:
			s.w.faults["snapshot-copy-retried"]++
		}
		if err != nil {
			s.w.record("n%d snapshot install of g%d from %v (attempt %d): %v", n.id, j.Group, j.Sources, j.Attempt, err)
		}
		per := durn(n.diskR, 2*time.Microsecond, 50*time.Microsecond)
		s.w.after(min(time.Duration(j.Copied)*per, 300*time.Millisecond), n, func() {
			n.rn.Installed(j, err)
			n.flush()
		})
	})
}

// fetchEntries copies committed entries from a replica this node can
// reach, as the production server does over HTTP (raftnode.EntryFetcher).
func (n *node) fetchEntries(group, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
	s := n.s
	p := s.node(peer)
	switch {
	case p == nil || p.down || p.paused:
		return nil, 0, fmt.Errorf("n%d is down", peer)
	case s.cut[[2]uint64{p.id, n.id}] > 0 || s.cut[[2]uint64{n.id, p.id}] > 0:
		return nil, 0, fmt.Errorf("n%d is cut off", peer)
	case p.logs[group] == nil:
		// A source that no longer (or does not yet) host the group: the
		// server's entries handler answers 404 (seed 993 with the control
		// plane: a moved-off replica, the simulator panicked here).
		return nil, 0, fmt.Errorf("n%d does not host group %d", peer, group)
	}
	ents, prev, err := p.logs[group].CommittedEntries(from, to, 1<<20)
	if err != nil {
		if errors.Is(err, storage.ErrCorrupt) {
			s.w.after(0, nil, func() {
				if !p.down {
					s.detect(p, "snapshot-source", err)
				}
			})
		}
		return nil, 0, err
	}
	out := make([]*raftpb.Entry, len(ents))
	for i, e := range ents {
		out[i] = proto.Clone(e).(*raftpb.Entry)
	}
	s.w.record("n%d copies snapshot entries [%d,%d] of g%d from n%d", n.id, from, ents[len(ents)-1].GetIndex(), group, p.id)
	return out, prev, nil
}

func (d simIO) Complete(c raftnode.Complete) {
	if f := d.n.futures[c.ID]; f != nil {
		delete(d.n.futures, c.ID)
		f(raftnode.Result{Index: c.Index, BaseOffset: c.BaseOffset, NextOffset: c.NextOffset}, c.Err)
	}
}

func (d simIO) Publish(group uint64, v raftnode.View) {
	n := d.n
	s := n.s
	g := n.grp[group]
	if g == nil {
		return
	}
	if v.HighWatermark < g.HighWatermark && v.AppliedTerm == g.AppliedTerm && v.Term != 0 {
		s.fail(checkHWM, "n%d group %d: high watermark went back from %d to %d", n.id, group, g.HighWatermark, v.HighWatermark)
	}
	wake := g.View.Wakes(v)
	g.View = v
	if wake {
		g.bump()
	}
}

// Stopped is the production fail-stop: the process ends (a supervisor
// restarts it later), or stays down for good if it found corruption.
func (d simIO) Stopped(err error) {
	n := d.n
	s := n.s
	if errors.Is(err, storage.ErrCorrupt) {
		s.w.after(0, nil, func() {
			if !n.down {
				s.detect(n, n.detectedBy, err)
			}
		})
		return
	}
	s.w.fault("node-failstop", "n%d stopped: %v", n.id, err)
	s.w.after(0, nil, func() {
		if n.down {
			return
		}
		n.stop(false)
		s.w.after(durn(s.nemR, 300*time.Millisecond, 2*time.Second), nil, func() { s.restart(n) })
	})
}
