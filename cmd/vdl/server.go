package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/internal/lograte"
	"github.com/vdl-project/vdl/server"
)

func serverCmd() *cobra.Command {
	var configPath string
	var bootstrap bool
	var o server.Config
	cmd := &cobra.Command{
		Use:   "server --config FILE",
		Short: "Run one VDL server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("--config is required")
			}
			cfg, err := server.LoadConfig(configPath)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("node-id") {
				cfg.NodeID = o.NodeID
			}
			if f.Changed("data-dir") {
				cfg.DataDir = o.DataDir
			}
			if f.Changed("kafka-listen") {
				cfg.KafkaListen = o.KafkaListen
			}
			if f.Changed("raft-listen") {
				cfg.RaftListen = o.RaftListen
			}
			if f.Changed("admin-listen") {
				cfg.AdminListen = o.AdminListen
			}
			if f.Changed("profile") {
				cfg.Profile = o.Profile
			}
			if f.Changed("log-level") {
				cfg.Log.Level = o.Log.Level
			}
			if bootstrap {
				cfg.InitialClusterState = "new"
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logger, err := newLogger(ctx, cfg.Log)
			if err != nil {
				return err
			}
			server.TuneGC(1)
			return server.Run(ctx, cfg, logger.With("node", cfg.NodeID))
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "TOML configuration file")
	f.Uint64Var(&o.NodeID, "node-id", 0, "override node_id")
	f.StringVar(&o.DataDir, "data-dir", "", "override data_dir")
	f.StringVar(&o.KafkaListen, "kafka-listen", "", "override kafka_listen")
	f.StringVar(&o.RaftListen, "raft-listen", "", "override raft_listen")
	f.StringVar(&o.AdminListen, "admin-listen", "", "override admin_listen")
	f.StringVar(&o.Profile, "profile", "", "override profile (modern or kafka-0.10)")
	f.StringVar(&o.Log.Level, "log-level", "", "override log level")
	f.BoolVar(&bootstrap, "bootstrap", false, "found a new cluster on an empty data dir (initial_cluster_state = \"new\")")
	return cmd
}

// newLogger writes to stderr at the configured level, with repeated
// warnings rate-limited (lograte); a goroutine reports a burst that stopped
// until ctx ends.
func newLogger(ctx context.Context, c server.LogConfig) (*slog.Logger, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	level, _ := c.SlogLevel()
	opts := &slog.HandlerOptions{Level: level}
	var inner slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if c.Format == "json" {
		inner = slog.NewJSONHandler(os.Stderr, opts)
	}
	h := lograte.New(inner, lograte.Options{Burst: logBurst, Interval: logInterval})
	go flushLogs(ctx, h)
	return slog.New(h), nil
}

// Each kind of warning is let through logBurst times per logInterval
// (docs/operations.md, Logs).
const (
	logBurst    = 5
	logInterval = 10 * time.Second
)

func flushLogs(ctx context.Context, h *lograte.Handler) {
	t := time.NewTicker(logInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.Flush(context.Background())
			return
		case <-t.C:
			h.Flush(ctx)
		}
	}
}
