// Package lograte is a slog.Handler wrapper that rate-limits repeated log
// lines, so that a scanner knocking on a port or a peer sending oversized
// messages cannot flood the log.
//
// Lines are "the same" when they have the same level, message and values of
// the identifying attributes (Options.KeyAttrs: by default "peer", "group",
// "stream" and "node", whose values are few). Every other attribute — remote
// addresses, errors, sizes — is left out of the key on purpose: a scanner
// brings a new remote address with every connection, and a key per address
// would let it through unlimited (and grow the table without bound).
//
// Each key lets Burst lines through per Interval. The rest are counted; when
// the interval is over, one line "MSG (suppressed K similar lines)" reports
// them: on the key's next line, on any later line once the interval ended, or
// on Flush (the server calls it on a ticker so a burst that stopped is still
// reported). Time comes from Options.Now, so tests are deterministic.
package lograte

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a Handler. Zero values take the defaults.
type Options struct {
	Burst    int           // lines per key per interval (default 5)
	Interval time.Duration // default 10s
	// MinLevel: lines below it are never limited. Zero means
	// slog.LevelWarn (debug and info lines are either wanted or switched
	// off by the level); to limit info lines too, give slog.LevelInfo-1.
	MinLevel slog.Level
	KeyAttrs []string         // attributes that identify a line's source
	Now      func() time.Time // default time.Now
	MaxKeys  int              // keys tracked at once (default 4096); beyond, lines pass unlimited
}

// DefaultKeyAttrs are the attributes that identify a line's source by default.
var DefaultKeyAttrs = []string{"peer", "group", "stream", "node"}

// Handler is the rate-limiting wrapper.
type Handler struct {
	inner   slog.Handler
	state   *state
	keyPart string // identifying attributes added with WithAttrs
}

type state struct {
	opts      Options
	mu        sync.Mutex
	keys      map[string]*window
	nextSweep time.Time // when to look for other keys' ended intervals
}

// window is one key's current interval.
type window struct {
	start      time.Time
	passed     int // lines let through in this interval
	suppressed int // lines held back in this interval
	last       slog.Record
	inner      slog.Handler // the handler of the last suppressed line (its With attributes)
}

// New wraps inner.
func New(inner slog.Handler, opts Options) *Handler {
	if opts.Burst <= 0 {
		opts.Burst = 5
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.MinLevel == 0 {
		opts.MinLevel = slog.LevelWarn
	}
	if opts.KeyAttrs == nil {
		opts.KeyAttrs = DefaultKeyAttrs
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 4096
	}
	return &Handler{inner: inner, state: &state{opts: opts, keys: map[string]*window{}}}
}

// Enabled reports the inner handler's answer.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// WithAttrs keeps the limiter shared, so lines of derived loggers are
// counted together.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	key := h.keyPart
	for _, a := range as {
		key += h.state.keyAttr(a)
	}
	return &Handler{inner: h.inner.WithAttrs(as), state: h.state, keyPart: key}
}

// WithGroup keeps the limiter shared.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), state: h.state, keyPart: h.keyPart}
}

// Handle lets r through unless its key already used its burst this interval.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.state.opts.MinLevel {
		return h.inner.Handle(ctx, r)
	}
	key := h.key(r)
	now := h.state.opts.Now()
	due, pass := h.state.admit(key, now, r, h.inner)
	for _, s := range due {
		_ = s.inner.Handle(ctx, s.record)
	}
	if !pass {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

// Flush reports every key whose interval ended with lines suppressed.
func (h *Handler) Flush(ctx context.Context) {
	h.state.mu.Lock()
	due := h.state.sweep(h.state.opts.Now())
	h.state.mu.Unlock()
	for _, s := range due {
		_ = s.inner.Handle(ctx, s.record)
	}
}

func (h *Handler) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(r.Message)
	b.WriteString(h.keyPart)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(h.state.keyAttr(a))
		return true
	})
	return b.String()
}

// keyAttr is a's part of the key: empty unless a identifies the source.
func (s *state) keyAttr(a slog.Attr) string {
	if !slices.Contains(s.opts.KeyAttrs, a.Key) {
		return ""
	}
	return "\x00" + a.Key + "=" + a.Value.String()
}

// summary is a line to emit on behalf of suppressed ones.
type summary struct {
	inner  slog.Handler
	record slog.Record
}

// admit decides whether a line of key passes, and returns the summaries of
// intervals that ended (key's own included).
func (s *state) admit(key string, now time.Time, r slog.Record, inner slog.Handler) ([]summary, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []summary
	if !now.Before(s.nextSweep) {
		due = s.sweep(now)
	}
	w := s.keys[key]
	if w != nil && s.ended(w, now) {
		due = appendSummary(due, w, now)
		w = nil
	}
	if w == nil {
		if len(s.keys) >= s.opts.MaxKeys {
			return due, true
		}
		w = &window{start: now}
		s.keys[key] = w
	}
	if w.passed < s.opts.Burst {
		w.passed++
		return due, true
	}
	w.suppressed++
	w.last, w.inner = r.Clone(), inner
	return due, false
}

func (s *state) ended(w *window, now time.Time) bool {
	return !now.Before(w.start.Add(s.opts.Interval))
}

// sweep ends every interval that is over: a key with suppressed lines
// yields a summary, the others are forgotten. It runs at most once an
// interval from Handle (so a busy log does not scan the table per line),
// which reports a burst that stopped at most one interval late.
func (s *state) sweep(now time.Time) []summary {
	var ended []string
	for k, w := range s.keys {
		if s.ended(w, now) {
			ended = append(ended, k)
		}
	}
	slices.Sort(ended) // summaries in a stable order, not the map's
	var due []summary
	for _, k := range ended {
		due = appendSummary(due, s.keys[k], now)
		delete(s.keys, k)
	}
	s.nextSweep = now.Add(s.opts.Interval)
	return due
}

func appendSummary(due []summary, w *window, now time.Time) []summary {
	if w.suppressed == 0 {
		return due
	}
	return append(due, summary{inner: w.inner, record: summaryRecord(w, now)})
}

// summaryRecord is the line that stands for w's suppressed lines: the last
// one's message and attributes, and the count.
func summaryRecord(w *window, now time.Time) slog.Record {
	r := slog.NewRecord(now, w.last.Level, fmt.Sprintf("%s (suppressed %d similar lines)", w.last.Message, w.suppressed), w.last.PC)
	w.last.Attrs(func(a slog.Attr) bool {
		r.AddAttrs(a)
		return true
	})
	r.AddAttrs(slog.Int("suppressed", w.suppressed))
	return r
}
