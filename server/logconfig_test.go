package server

import (
	"log/slog"
	"strings"
	"testing"
)

func TestUnknownLogLevelIsRefused(t *testing.T) {
	for _, ok := range []string{"", "debug", "INFO", "warn", "error"} {
		if _, err := (LogConfig{Level: ok}).SlogLevel(); err != nil {
			t.Errorf("level %q: %v", ok, err)
		}
	}
	if l, _ := (LogConfig{}).SlogLevel(); l != slog.LevelInfo {
		t.Errorf("default level %v, want info", l)
	}
	err := LogConfig{Level: "verbose"}.Check()
	if err == nil || !strings.Contains(err.Error(), `"verbose"`) || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Fatalf("got %v, want an error naming the value and the allowed ones", err)
	}
	cfg := Config{NodeID: 1, DataDir: "d", KafkaListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0",
		Peers: []Peer{{ID: 1}}, Log: LogConfig{Level: "trace"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `log level "trace"`) {
		t.Fatalf("Validate: %v", err)
	}
	if err := (LogConfig{Format: "xml"}).Check(); err == nil {
		t.Fatal("format xml accepted")
	}
}
