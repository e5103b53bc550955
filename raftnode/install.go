package raftnode

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pingcap/failpoint"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/storage"
)

// Snapshot installs. A VDL snapshot stands for the sender's log, so a
// follower installing one copies the entries it stands for from the
// group's replicas (storage.Log.InstallSnapshot), chunk by chunk. Each
// replica serves only entries it knows are committed, so every chunk, from
// whichever replica, belongs to the one committed log, and the install
// checks that each chunk continues what it holds.
//
// An attempt that cannot reach a replica able to serve the next chunk is
// retried with backoff (the install's progress is kept: the log is a valid
// prefix). One that finds the range deleted by retention on every replica
// gives up: the group restarts from its log as it is, and the leader,
// finding the follower still behind, sends a fresh snapshot.

// Errors of an install attempt.
var (
	// ErrSnapshotGone: every replica answered that the entries are gone
	// (or not committed there), or, attempt after attempt, those that
	// answered did and the others did not answer.
	ErrSnapshotGone = errors.New("raftnode: snapshot entries deleted on every replica that answers")
	// ErrSnapshotUnavailable: no replica could serve the entries now.
	ErrSnapshotUnavailable = errors.New("raftnode: no replica can serve the snapshot entries now")
)

// EntryFetcher copies committed entries [from, to] of a group's log from a
// peer and the term of the entry before them (storage.Log.CommittedEntries
// on the peer). It may return fewer entries than asked. Errors wrapping
// storage.ErrOutOfRange mean the peer no longer has them.
type EntryFetcher func(group, peer, from, to uint64) (ents []*raftpb.Entry, prevTerm uint64, err error)

// InstallJob is one attempt to install the snapshot an append carries. A
// driver runs it off the Node's loop and reports Node.Installed.
type InstallJob struct {
	Group   uint64
	Append  Append
	Sources []uint64 // replicas to copy from, the sender first
	Attempt int      // 0 for the first
	// Copied counts the entries the last attempt copied (the simulator
	// models the copy's duration with it).
	Copied int
	log    Log
	// contexts are those of the membership changes among the entries
	// copied, in log order, every attempt's: the snapshot's membership
	// says who the members are, and only these say which data dir each
	// one added is (Installed).
	contexts [][]byte
}

// installRetryTicks bounds the backoff between attempts, in ticks.
const installRetryTicks = 20

// installPatience is the attempt from which an install gives up when the
// entries are gone on a replica and none of the others serves them: a
// replica that does not answer may be down for good (one that found its
// disk corrupt stops until an operator acts), and the install waited on
// it for ever though the leader, asked for a newer snapshot, can serve
// one (simulator seed 147 with bit flips). Until then, one that does not
// answer may come back with the entries. Giving up loses nothing: the
// log keeps what was copied.
const installPatience = 8

// Run runs one attempt. If it gives up (ErrSnapshotGone), what it wrote is
// made durable first: the group restarts from the log as it is.
func (j *InstallJob) Run(fetch EntryFetcher) error {
	failpoint.Inject("beforeSnapshotInstall", func(val failpoint.Value) {
		failpoints.Hit("raftnode/beforeSnapshotInstall")
		failpoints.CrashOn(val)
		if failpoints.EIO(val) {
			failpoint.Return(failpoints.IOError())
		}
	})
	j.Copied = 0
	err := j.log.InstallSnapshot(j.Append.Msg.GetSnapshot(), j.source(fetch))
	if errors.Is(err, ErrSnapshotGone) {
		if _, serr := j.log.Sync(); serr != nil {
			return serr
		}
	}
	return err
}

// source tries the sources in order for each chunk.
func (j *InstallJob) source(fetch EntryFetcher) storage.EntrySource {
	return func(from, to uint64) ([]*raftpb.Entry, uint64, error) {
		// gone: deleted there; behind: not committed there yet. The entries
		// are committed (the snapshot covers them), so a replica behind can
		// only get them from one that holds them: when every source is
		// gone or behind, nobody will ever serve them, and the install
		// gives up so that the leader sends a newer snapshot. (Counting
		// only "gone", two lagging replicas installing the same old
		// snapshot kept each other retrying for ever: seed 1435.) Nor,
		// after installPatience attempts, when the rest do not answer.
		gone, behind := 0, 0
		var errs []error
		for _, p := range j.Sources {
			ents, prev, err := fetch(j.Group, p, from, to)
			if err == nil && len(ents) > 0 && ents[0].GetIndex() == from {
				j.Copied += len(ents)
				j.contexts = append(j.contexts, confContexts(ents)...)
				return ents, prev, nil
			}
			if err == nil {
				err = fmt.Errorf("answered %d entries, not from %d", len(ents), from)
			}
			switch {
			case errors.Is(err, storage.ErrOutOfRange):
				gone++
			case errors.Is(err, storage.ErrNotCommitted):
				behind++
			}
			errs = append(errs, fmt.Errorf("node %d: %w", p, err))
		}
		if gone > 0 && (gone+behind == len(j.Sources) || j.Attempt >= installPatience) {
			return nil, 0, fmt.Errorf("%w: [%d, %d]: %v", ErrSnapshotGone, from, to, errors.Join(errs...))
		}
		return nil, 0, fmt.Errorf("%w: [%d, %d]: %v", ErrSnapshotUnavailable, from, to, errors.Join(errs...))
	}
}

// confContexts returns the non-empty contexts of the membership changes
// among ents, in order. Entries that do not decode are skipped: they came
// from a peer, and the install checks what it stores.
func confContexts(ents []*raftpb.Entry) [][]byte {
	var out [][]byte
	for _, e := range ents {
		if cc, err := confChangeOf(e); err == nil && cc != nil {
			if ctx := cc.AsV2().GetContext(); len(ctx) > 0 {
				out = append(out, ctx)
			}
		}
	}
	return out
}

// confChangeOf decodes a membership change entry; nil, nil for any other.
func confChangeOf(e *raftpb.Entry) (raftpb.ConfChangeI, error) {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		return &cc, proto.Unmarshal(e.GetData(), &cc)
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		return &cc, proto.Unmarshal(e.GetData(), &cc)
	}
	return nil, nil
}

// startInstall starts the first attempt to install the snapshot a carries.
func (n *Node) startInstall(a Append) {
	srcs := []uint64{a.Leader}
	for _, id := range n.core.members(a.Group) {
		if id != n.ID() && id != a.Leader {
			srcs = append(srcs, id)
		}
	}
	if a.Leader == 0 || a.Leader == n.ID() {
		srcs = srcs[1:]
	}
	j := &InstallJob{Group: a.Group, Append: a, Sources: srcs, log: n.logs[a.Group]}
	n.installs[a.Group] = j
	n.d.Install(j)
}

// Installed reports the end of an install attempt.
func (n *Node) Installed(j *InstallJob, err error) {
	g := j.Group
	p := &n.pipe
	if n.err != nil || n.installs[g] != j {
		return
	}
	switch {
	case err == nil:
		delete(n.installs, g)
		n.installedConf(j.Append)
		if n.cfg.OnMembership != nil { // the membership comes with the snapshot
			cs := j.Append.Msg.GetSnapshot().GetMetadata().GetConfState()
			n.cfg.OnMembership(g, cs, nil)
			// Then what the changes it jumps over said of their nodes: a
			// node removed and added back with a new data dir (a replaced
			// disk) is a member before and after, and without its add's
			// context this server would know it by its old dir for good.
			for _, ctx := range j.contexts {
				n.cfg.OnMembership(g, cs, ctx)
			}
		}
		waiting := p.installing[g]
		delete(p.installing, g)
		p.last[g] = lastIndex(j.log)
		p.queue = append(append([]Effect{installed{j.Append}}, waiting...), p.queue...)
	case errors.Is(err, ErrSnapshotGone):
		n.log.Warn("snapshot entries are gone; restarting the group for a fresh snapshot", "group", g, "err", err)
		n.restartGroup(g)
	case errors.Is(err, ErrSnapshotUnavailable), errors.Is(err, storage.ErrDiverged):
		j.Attempt++
		wait := uint64(min(1<<min(j.Attempt-1, 5), installRetryTicks))
		n.log.Warn("copying snapshot entries failed; retrying", "group", g, "attempt", j.Attempt, "in_ticks", wait, "err", err)
		n.retries[g] = n.ticks + wait
	default:
		n.failStop(fmt.Errorf("group %d: install snapshot: %w", g, err))
	}
}

// retryInstalls starts the install attempts whose backoff is over.
func (n *Node) retryInstalls() {
	for _, g := range sortedGroups(n.retries) {
		if n.retries[g] <= n.ticks {
			delete(n.retries, g)
			if j := n.installs[g]; j != nil {
				n.d.Install(j)
			}
		}
	}
}

// restartGroup drops a group's raft state and effects waiting behind an
// install that gave up, and starts the group again from its log, which is
// durable and valid (a prefix of the leader's, at worst its old state).
func (n *Node) restartGroup(g uint64) {
	delete(n.installs, g)
	delete(n.pipe.installing, g)
	delete(n.retries, g)
	// Storage effects of the group not yet written belong to the raft
	// that is going: written and reported now, the new one would send
	// their acknowledgements (simulator seed 634: a follower acknowledged
	// entries it had appended after the snapshot it then gave up, and the
	// leader's next heartbeat committed past its log).
	n.pipe.queue = slices.DeleteFunc(n.pipe.queue, func(e Effect) bool {
		eg, _ := EffectGroup(e)
		return eg == g
	})
	l := n.logs[g]
	n.core.RemoveGroup(g)
	if err := n.core.AddGroup(g, l); err != nil {
		n.failStop(fmt.Errorf("group %d: restart after a failed install: %w", g, err))
		return
	}
	n.pipe.last[g] = lastIndex(l)
	n.found(g, l)
}
