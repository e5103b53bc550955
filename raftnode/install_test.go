package raftnode

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
)

// A snapshot's entries are gone when every source has deleted them or has
// not even committed them (a lagging replica can only get them from one
// that holds them): the install gives up, and the leader sends a newer
// snapshot. A source that does not answer may still hold them: retry, up
// to installPatience attempts (it may be down for good: seed 147 with bit
// flips retried for ever behind a server stopped on a corrupt disk).
func TestInstallSourceGivesUpWhenNobodyHoldsTheEntries(t *testing.T) {
	answers := func(errs map[uint64]error) EntryFetcher {
		return func(_, peer, _, _ uint64) ([]*raftpb.Entry, uint64, error) { return nil, 0, errs[peer] }
	}
	gone := fmt.Errorf("%w: entry 331, log starts at 440", storage.ErrOutOfRange)
	behind := fmt.Errorf("%w: entry 331, committed up to 330", storage.ErrNotCommitted)
	down := fmt.Errorf("connection refused")
	for _, tc := range []struct {
		name    string
		answers map[uint64]error
		attempt int
		want    error
	}{
		{"all deleted", map[uint64]error{1: gone, 3: gone}, 0, ErrSnapshotGone},
		{"deleted or behind (seed 1435)", map[uint64]error{1: gone, 3: behind}, 0, ErrSnapshotGone},
		{"all behind: someone may commit them", map[uint64]error{1: behind, 3: behind}, 0, ErrSnapshotUnavailable},
		{"one does not answer", map[uint64]error{1: gone, 3: down}, 0, ErrSnapshotUnavailable},
		{"one does not answer, attempt after attempt", map[uint64]error{1: gone, 3: down}, installPatience, ErrSnapshotGone},
		{"none answers, attempt after attempt", map[uint64]error{1: down, 3: down}, installPatience, ErrSnapshotUnavailable},
	} {
		j := &InstallJob{Group: 2, Sources: []uint64{1, 3}, Attempt: tc.attempt}
		_, _, err := j.source(answers(tc.answers))(331, 533)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
}
