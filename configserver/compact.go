package configserver

import (
	"context"
	"fmt"

	"github.com/vdl-project/vdl/raftnode"
)

// Log compaction. The bbolt state is the config servers' snapshot: it
// records the next offset to apply, so the commands below it are not
// needed by this config server again. The leader, once a second, proposes
// a retention of the command log (the data streams' replicated retention,
// raftnode.RetainData) once more than CompactAfter commands lie between
// the log's start and the applied state: up to the lowest point every
// config server has (the leader's match of every voter, and its own
// applied state), less CompactAfter/10 commands kept for a follower just
// behind. Every config server deletes the whole segments below it
// (storage.Log.DeleteBefore). So no config server ever needs a command
// that is gone: a follower's state is built from commands it has.
//
// A config server whose state is behind its log's start (its state.db
// lost while its log survived) refuses to start: copy state.db from
// another config server (docs/operations.md).

// compactionPoint is the offset below which the log may be deleted, and
// whether a retention is due.
func (s *Service) compactionPoint() (int64, bool) {
	if s.cfg.CompactAfter <= 0 {
		return 0, false
	}
	applied, start := s.state.Applied(), s.slog.StartOffset()
	if applied-start <= int64(s.cfg.CompactAfter) {
		return 0, false
	}
	st, ok := s.host.Status(group)
	if !ok {
		return 0, false
	}
	before := applied
	for _, id := range append(st.Voters, st.Learners...) {
		p, ok := st.Progress[id]
		if !ok {
			return 0, false // a member the leader knows nothing of: wait
		}
		next, err := s.slog.NextOffsetAt(p.Match)
		if err != nil {
			return 0, false
		}
		before = min(before, next)
	}
	before -= int64(s.cfg.CompactAfter / 10)
	return before, before > start
}

// compact proposes the retention due, on the leader.
func (s *Service) compact(ctx context.Context) error {
	before, ok := s.compactionPoint()
	if !ok {
		return nil
	}
	if _, err := s.host.Propose(ctx, group, raftnode.RetainData(before)); err != nil {
		return fmt.Errorf("compacting the config log before %d: %w", before, err)
	}
	s.log.Info("config log compacted", "before", before, "applied", s.state.Applied())
	return nil
}

// checkStateCoversLog refuses a state that is behind the log's start.
func (s *Service) checkStateCoversLog() error {
	if s.ident.Joined {
		return nil // a joining config server copies the state (statecopy.go)
	}
	if start, applied := s.slog.StartOffset(), s.state.Applied(); applied < start {
		return fmt.Errorf("%w: state.db has applied the commands below %d, but the config log starts at %d "+
			"(compacted): the state is older than the log; copy state.db from another config server (docs/operations.md)",
			ErrIdentity, applied, start)
	}
	return nil
}
