package configserver

import (
	"context"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Former replicas (Stream.Former) are kept so that no move takes a stream
// back to a server that left it while a replica may still count that
// server's old self: a replica that missed the removal (cut off, with an
// older membership) could win the empty rejoiner's vote and overwrite
// committed entries (simulator seed 28 with -sim.controlplane). The danger
// is over once (1) the former replica's copy is gone — it reports, in
// this leader's term, that it does not host the group — and (2) nobody
// can count it any more: every replica reports hosting the group with a
// membership without it (a replica that does not host it yet may be a
// founder that has still to bootstrap it with the founders as voters), and
// every other former replica reports either no copy or a membership
// without it. Memberships only move forward (a replica applies them from
// the log, or installs a newer one with a snapshot), so what was reported
// stays true. Then the server stops counting as a former replica (a
// replicated former-released command) and a move may take the stream
// back to it: it rejoins empty, a learner, like any new replica. Without
// this the list only grew, and in a small cluster repeated moves of one
// stream ran out of targets.

// CmdFormerReleased: a former replica no longer counts (Name the stream,
// Node the server).
const CmdFormerReleased = "former-released"

// GroupView is what a server last reported about one group, as the config
// servers' leader heard it in its term.
type GroupView struct {
	Heard   bool     // it reported in this leader's term, recently
	Hosts   bool     // its report lists the group
	Members []uint64 // the group's voters and learners as it applied them
}

// ReleasedFormers are the former replicas of st that no longer count
// (above), given each server's view of st's group (a server missing from
// views was not heard from). busy: the stream has an active move (nothing
// is released meanwhile). Pure and deterministic: the production driver
// and the simulator's control plane decide with it.
func ReleasedFormers(st Stream, busy bool, views map[uint64]GroupView) []uint64 {
	if busy || st.State != StreamActive {
		return nil
	}
	var out []uint64
	for _, x := range st.Former {
		if v := views[x]; !v.Heard || v.Hosts || slices.Contains(st.Replicas, x) {
			continue
		}
		ok := true
		for _, r := range st.Replicas {
			if v := views[r]; !v.Heard || !v.Hosts || slices.Contains(v.Members, x) {
				ok = false
				break
			}
		}
		for _, f := range st.Former {
			if v := views[f]; f != x && (!v.Heard || v.Hosts && slices.Contains(v.Members, x)) {
				ok = false
				break
			}
		}
		for _, v := range views { // any other server holding a membership with it
			if v.Hosts && slices.Contains(v.Members, x) {
				ok = false
			}
		}
		if ok {
			out = append(out, x)
		}
	}
	return out
}

func applyFormerReleased(tx *bolt.Tx, c Command) (string, error) {
	st, err := activeStream(tx, c.Name)
	if err != nil {
		return "", err
	}
	if err := st.ReleaseFormer(c.Node); err != nil {
		return "", err
	}
	return fmt.Sprintf("stream %s: server %d no longer counts as a former replica (its copy is gone, no replica's membership has it): "+
		"the stream may move back to it", c.Name, c.Node), putJSON(tx.Bucket(bStreams), []byte(st.Name), st)
}

// ReleaseFormer makes node no longer a former replica of st (the state
// machine's and the simulator's control plane's).
func (st *Stream) ReleaseFormer(node uint64) error {
	i := slices.Index(st.Former, node)
	if i < 0 {
		return fmt.Errorf("%w: server %d is not a former replica of %s", ErrNotFound, node, st.Name)
	}
	st.Former = slices.Delete(slices.Clone(st.Former), i, i+1)
	if len(st.Former) == 0 {
		st.Former = nil
	}
	return nil
}

// groupViews is what every server heard in this term reported about group.
func (s *Service) groupViews(group uint64, now time.Time) map[uint64]GroupView {
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	views := map[uint64]GroupView{}
	for id, h := range s.soft.reports {
		v := GroupView{Heard: now.Sub(h.at) <= s.downAfter()}
		for _, g := range h.report.Groups {
			if g.Group == group {
				v.Hosts, v.Members = true, append(slices.Clone(g.Voters), g.Learners...)
			}
		}
		views[id] = v
	}
	return views
}

// releaseFormers, on the leader, releases the former replicas that no
// longer count (ReleasedFormers), one command each.
func (s *Service) releaseFormers(ctx context.Context, now time.Time) {
	busy := map[string]bool{}
	for _, m := range s.state.Moves() {
		if m.State == MoveActive {
			busy[m.Stream] = true
		}
	}
	for _, st := range s.state.Streams() {
		if len(st.Former) == 0 || busy[st.Name] || st.State != StreamActive {
			continue
		}
		for _, x := range ReleasedFormers(st, false, s.groupViews(st.Group, now)) {
			out, err := s.propose(ctx, Command{Kind: CmdFormerReleased, At: now.UnixMilli(), Name: st.Name, Node: x})
			if err == nil {
				err = out.Error()
			}
			if err != nil {
				s.log.Warn("releasing a former replica", "stream", st.Name, "server", x, "err", err)
				return
			}
		}
	}
}
