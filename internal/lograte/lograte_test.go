package lograte

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestLogger() (*slog.Logger, *Handler, *bytes.Buffer, *fakeClock) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	inner := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	h := New(inner, Options{Burst: 2, Interval: time.Second, Now: clk.now})
	return slog.New(h), h, &buf, clk
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestBurstThenSummaryOnNextAllowedLine(t *testing.T) {
	log, _, buf, clk := newTestLogger()
	for i := range 10 {
		log.Warn("rejecting connection", "remote", "10.0.0.1:"+string(rune('0'+i)))
	}
	got := lines(buf)
	if len(got) != 2 {
		t.Fatalf("want the burst of 2 lines, got %d: %q", len(got), got)
	}
	clk.advance(time.Second)
	log.Warn("rejecting connection", "remote", "10.0.0.2:1")
	got = lines(buf)
	want := []string{
		`level=WARN msg="rejecting connection (suppressed 8 similar lines)" remote=10.0.0.1:9 suppressed=8`,
		`level=WARN msg="rejecting connection" remote=10.0.0.2:1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFlushReportsAnEndedInterval(t *testing.T) {
	log, h, buf, clk := newTestLogger()
	for range 5 {
		log.Warn("dropping message", "peer", 2)
	}
	lines(buf)
	h.Flush(context.Background())
	if got := lines(buf); got != nil {
		t.Fatalf("flush before the interval ended wrote %q", got)
	}
	clk.advance(time.Second)
	h.Flush(context.Background())
	got := lines(buf)
	if len(got) != 1 || !strings.Contains(got[0], "suppressed 3 similar lines") || !strings.Contains(got[0], "peer=2") {
		t.Fatalf("got %q", got)
	}
	h.Flush(context.Background())
	if got := lines(buf); got != nil {
		t.Fatalf("a second flush repeated the summary: %q", got)
	}
}

func TestIdentifyingAttributesMakeSeparateKeys(t *testing.T) {
	log, _, buf, _ := newTestLogger()
	for range 3 {
		log.Warn("dropping message", "peer", 2, "bytes", 100)
		log.Warn("dropping message", "peer", 3, "bytes", 100)
		log.With("peer", 4).Warn("dropping message")
	}
	if got := lines(buf); len(got) != 6 {
		t.Fatalf("want 2 lines for each of 3 peers, got %d: %q", len(got), got)
	}
}

func TestLevelsAndMessagesAreKeys(t *testing.T) {
	log, _, buf, _ := newTestLogger()
	for range 3 {
		log.Warn("a")
		log.Error("a")
		log.Warn("b")
		log.Info("a") // below MinLevel: never limited
	}
	if got := lines(buf); len(got) != 2+2+2+3 {
		t.Fatalf("got %d lines: %q", len(got), got)
	}
}

func TestAnotherLineReportsAStoppedBurst(t *testing.T) {
	log, _, buf, clk := newTestLogger()
	log.Warn("other")
	for range 4 {
		log.Warn("flood")
	}
	lines(buf)
	clk.advance(2 * time.Second)
	log.Warn("other")
	got := lines(buf)
	if len(got) != 2 || !strings.Contains(got[0], `msg="flood (suppressed 2 similar lines)"`) {
		t.Fatalf("got %q", got)
	}
}

func TestKeyTableIsBounded(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.NewTextHandler(&buf, nil), Options{Burst: 1, MaxKeys: 2})
	log := slog.New(h)
	for i := range 10 {
		log.Warn("x", "peer", i)
	}
	if n := len(h.state.keys); n != 2 {
		t.Fatalf("tracked %d keys, want at most 2", n)
	}
	if got := lines(&buf); len(got) != 10 {
		t.Fatalf("lines beyond the table's size are let through: got %d", len(got))
	}
}
