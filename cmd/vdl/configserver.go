package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/server"
)

// configServerCmd runs one config server (docs/configserver.md).
func configServerCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "configserver --config FILE",
		Short: "Run one config server (the control plane: streams, placement, servers' health)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigServerConfig(configPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logger, err := newLogger(ctx, server.LogConfig{})
			if err != nil {
				return err
			}
			logger = logger.With("config_server", cfg.ID)
			s, err := configserver.Start(cfg, logger)
			if err != nil {
				return err
			}
			logger.Info("config server started", "api", s.APIAddr(), "raft", cfg.RaftListen)
			<-ctx.Done()
			logger.Info("shutting down")
			return s.Close()
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "TOML configuration file")
	return cmd
}

// loadConfigServerConfig reads a config server's TOML (configserver.LoadConfig).
func loadConfigServerConfig(path string) (configserver.Config, error) {
	if path == "" {
		return configserver.Config{}, fmt.Errorf("--config is required")
	}
	return configserver.LoadConfig(path)
}
