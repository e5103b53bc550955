package raftnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
)

// quietLogger drops raft's chatter and keeps warnings and errors on stderr.
// Panics and fatals keep raft's meaning.
type quietLogger struct{}

func (quietLogger) Debug(...any)            {}
func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Info(...any)             {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Warning(v ...any)        {}
func (quietLogger) Warningf(string, ...any) {}
func (quietLogger) Error(v ...any)          { fmt.Fprintln(os.Stderr, append([]any{"raft error:"}, v...)...) }
func (quietLogger) Errorf(f string, v ...any) {
	fmt.Fprintf(os.Stderr, "raft error: "+f+"\n", v...)
}
func (quietLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (quietLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

// SlogLogger adapts raft's logger to slog; raft's Info is logged at Debug
// because raft narrates every election at Info. A line below the logger's
// level is not formatted at all: raft narrates every RawNode it builds,
// and a server rebuilds thousands of them at a restart or as hibernating
// followers wake.
type SlogLogger struct{ L *slog.Logger }

// print and printf log what raft says at level, formatted only if the
// logger takes that level.
func (s SlogLogger) print(level slog.Level, v []any) {
	if ctx := context.Background(); s.L.Enabled(ctx, level) {
		s.L.Log(ctx, level, fmt.Sprint(v...))
	}
}

func (s SlogLogger) printf(level slog.Level, f string, v []any) {
	if ctx := context.Background(); s.L.Enabled(ctx, level) {
		s.L.Log(ctx, level, fmt.Sprintf(f, v...))
	}
}

func (s SlogLogger) Debug(v ...any)              { s.print(slog.LevelDebug, v) }
func (s SlogLogger) Debugf(f string, v ...any)   { s.printf(slog.LevelDebug, f, v) }
func (s SlogLogger) Info(v ...any)               { s.print(slog.LevelDebug, v) }
func (s SlogLogger) Infof(f string, v ...any)    { s.printf(slog.LevelDebug, f, v) }
func (s SlogLogger) Warning(v ...any)            { s.print(slog.LevelWarn, v) }
func (s SlogLogger) Warningf(f string, v ...any) { s.printf(slog.LevelWarn, f, v) }
func (s SlogLogger) Error(v ...any)              { s.print(slog.LevelError, v) }
func (s SlogLogger) Errorf(f string, v ...any)   { s.printf(slog.LevelError, f, v) }
func (s SlogLogger) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (s SlogLogger) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (s SlogLogger) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (s SlogLogger) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
