package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// The errors of the layers below reach the Kafka front end as its own
// (which kafka's tests map to Kafka codes), with the original kept.
func TestKafkaErrorTranslation(t *testing.T) {
	for _, c := range []struct {
		err, want error
	}{
		{raftnode.ErrNotLeader, kafka.ErrNotLeader},
		{raftnode.ErrOverwritten, kafka.ErrNotLeader},
		// Unknown outcomes (the entry may commit without this server): never
		// NOT_LEADER, which tells a client nothing was written.
		{raftnode.ErrShutdown, kafka.ErrTimeout},
		{raftnode.ErrStopped, kafka.ErrTimeout},
		{fmt.Errorf("%w: sync: injected I/O error", raftnode.ErrStopped), kafka.ErrTimeout},
		{raftnode.ErrUnknownOutcome, kafka.ErrTimeout},
		{raftnode.ErrUnknownGroup, kafka.ErrUnknownStream},
		{raftnode.ErrBackpressure, kafka.ErrBackpressure},
		{raftnode.ErrChainFailed, kafka.ErrBackpressure},
		{raftnode.ErrEntryTooLarge, kafka.ErrTooLarge},
		{raftnode.ErrDiskFull, kafka.ErrDiskFull},
		{fmt.Errorf("%w: offset 9, readable [0, 3]", storage.ErrOutOfRange), kafka.ErrOutOfRange},
	} {
		got := kafkaError(c.err)
		require.ErrorIs(t, got, c.want, "%v", c.err)
		if c.want != kafka.ErrNotLeader {
			require.NotErrorIs(t, got, kafka.ErrNotLeader, "%v", c.err)
		}
		require.ErrorIs(t, got, c.err, "the original stays in the chain")
	}
	require.NoError(t, kafkaError(nil))
	other := errors.New("other")
	require.Equal(t, other, kafkaError(other), "errors without a Kafka meaning pass unchanged")
}

func TestKafkaDefaultRecordSetFitsARaftEntry(t *testing.T) {
	require.Equal(t, raftnode.DefaultMaxEntryBytes-1, kafka.DefaultMaxRecordSetBytes)
}
