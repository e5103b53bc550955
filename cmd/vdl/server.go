package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

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
			logger := newLogger(cfg.Log).With("node", cfg.NodeID)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return server.Run(ctx, cfg, logger)
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

func newLogger(c server.LogConfig) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(c.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
