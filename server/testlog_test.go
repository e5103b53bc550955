package server

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// testLogKeep is how much of a test cluster's log a failed test prints:
// the last warnings before it failed, which is where a flake's cause is.
const testLogKeep = 64 << 10

// tailLog keeps the last testLogKeep bytes written to it.
type tailLog struct {
	mu  sync.Mutex
	buf []byte
}

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - testLogKeep; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// testLogger is the logger of a test's servers and config servers:
// warnings to stderr with -v; otherwise kept, and printed if the test
// fails (CI runs without -v, and a flake's only trace is its output).
func testLogger(t testing.TB) *slog.Logger {
	var w io.Writer = os.Stderr
	if !testing.Verbose() {
		tail := &tailLog{}
		t.Cleanup(func() {
			if t.Failed() {
				tail.mu.Lock()
				defer tail.mu.Unlock()
				t.Logf("the cluster's last warnings:\n%s", tail.buf)
			}
		})
		w = tail
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
