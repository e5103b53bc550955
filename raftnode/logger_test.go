package raftnode

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// countedArg counts how often it is formatted.
type countedArg struct{ n *int }

func (a countedArg) String() string { *a.n++; return "arg" }

// Raft's narration below the logger's level is not formatted (raft
// narrates every RawNode it builds: thousands at a restart); what is at
// or above it is logged as before, raft's Info at Debug.
func TestSlogLoggerFormatsOnlyWhatItLogs(t *testing.T) {
	var out bytes.Buffer
	l := SlogLogger{L: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	formatted := 0
	arg := countedArg{&formatted}
	l.Infof("newRaft %v", arg)
	l.Info("became follower", arg)
	l.Debugf("%v", arg)
	require.Zero(t, formatted, "nothing below warn is formatted")
	require.Empty(t, out.String())

	l.Warningf("dropping %v", arg)
	l.Error("failed", arg)
	require.Equal(t, 2, formatted)
	require.Contains(t, out.String(), `level=WARN msg="dropping arg"`)
	require.Contains(t, out.String(), `level=ERROR msg=failedarg`)

	out.Reset()
	l = SlogLogger{L: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Infof("newRaft %v", arg)
	require.Contains(t, out.String(), `level=DEBUG msg="newRaft arg"`)
}

// BenchmarkSlogLoggerBelowLevel: raft's Info line at a server's default
// level (info: raft's Info is logged at Debug).
func BenchmarkSlogLoggerBelowLevel(b *testing.B) {
	l := SlogLogger{L: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	b.ReportAllocs()
	for b.Loop() {
		l.Infof("%x became follower at term %d [logterm: %d, index: %d, vote: %x]", uint64(1), uint64(7), uint64(7), uint64(1234), uint64(0))
	}
}
