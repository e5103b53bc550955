package raftnode

// The Host's side of the Node's jobs: the writer and syncer goroutines
// that run the storage pipeline's jobs, and the Host as the Node's Driver.

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

func (h *Host) runWrites() {
	defer h.workers.Done()
	for j := range h.writes {
		err := timed(j.Run, h.cfg.ObserveWrite)
		_ = h.do(func() { h.node.Written(j, err) })
	}
}

// ConcurrentSyncs is how many logs a Host fsyncs at once.
const ConcurrentSyncs = 32

func (h *Host) runSyncs() {
	defer h.workers.Done()
	for j := range h.syncs {
		observe := h.cfg.ObserveSync
		if j.Logs() == 0 {
			observe = nil // only answers waiting their turn: no fsync to time
		}
		err := timed(func() error { return j.RunConcurrently(ConcurrentSyncs) }, observe)
		_ = h.do(func() { h.node.Synced(j, err) })
	}
}

// timed runs job and tells observe (if set) how long it took.
func timed(job func() error, observe func(time.Duration)) error {
	if observe == nil {
		return job()
	}
	start := time.Now()
	err := job()
	observe(time.Since(start))
	return err
}

// hostDriver is the Host as the Node's Driver (on the loop).
type hostDriver struct{ h *Host }

func (d hostDriver) Send(group uint64, m *raftpb.Message) {
	if c := d.h.appends; c != nil && clocked(m) {
		c.sending(group, m, time.Now())
	}
	d.h.cfg.Sender.Send(group, m)
}
func (d hostDriver) Write(j *WriteJob) { d.h.writes <- j }
func (d hostDriver) Sync(j *SyncJob)   { d.h.syncs <- j }

func (d hostDriver) Install(j *InstallJob) {
	h := d.h
	h.workers.Add(1)
	go func() {
		defer h.workers.Done()
		err := j.Run(h.cfg.Fetch)
		if h.cfg.ObserveInstall != nil {
			h.cfg.ObserveInstall(err)
		}
		_ = h.do(func() { h.node.Installed(j, err) })
	}()
}

func (d hostDriver) Complete(c Complete) {
	h := d.h
	h.mu.Lock()
	done, ok := h.futures[c.ID]
	delete(h.futures, c.ID)
	h.mu.Unlock()
	if ok {
		done(Result{Index: c.Index, BaseOffset: c.BaseOffset, NextOffset: c.NextOffset}, c.Err)
	}
}

func (d hostDriver) Publish(group uint64, v View) {
	h := d.h
	h.mu.Lock()
	defer h.mu.Unlock()
	gv, ok := h.views[group]
	if !ok {
		return
	}
	wake := gv.View.Wakes(v)
	gv.View = v
	if wake {
		close(gv.changed) // waiters re-check leadership too
		gv.changed = make(chan struct{})
	}
}

func (d hostDriver) Stopped(err error) {
	h := d.h
	h.fail(err)
	select {
	case <-h.failed:
	default:
		close(h.failed)
	}
}
