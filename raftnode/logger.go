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

func (s SlogLogger) on(level slog.Level) bool { return s.L.Enabled(context.Background(), level) }

func (s SlogLogger) Debug(v ...any) {
	if s.on(slog.LevelDebug) {
		s.L.Debug(fmt.Sprint(v...))
	}
}

func (s SlogLogger) Debugf(f string, v ...any) {
	if s.on(slog.LevelDebug) {
		s.L.Debug(fmt.Sprintf(f, v...))
	}
}

func (s SlogLogger) Info(v ...any)            { s.Debug(v...) }
func (s SlogLogger) Infof(f string, v ...any) { s.Debugf(f, v...) }

func (s SlogLogger) Warning(v ...any) {
	if s.on(slog.LevelWarn) {
		s.L.Warn(fmt.Sprint(v...))
	}
}

func (s SlogLogger) Warningf(f string, v ...any) {
	if s.on(slog.LevelWarn) {
		s.L.Warn(fmt.Sprintf(f, v...))
	}
}

func (s SlogLogger) Error(v ...any) {
	if s.on(slog.LevelError) {
		s.L.Error(fmt.Sprint(v...))
	}
}

func (s SlogLogger) Errorf(f string, v ...any) {
	if s.on(slog.LevelError) {
		s.L.Error(fmt.Sprintf(f, v...))
	}
}

func (s SlogLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (s SlogLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (s SlogLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (s SlogLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
