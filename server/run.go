package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/vdl-project/vdl/kafka"
)

// ErrFailStop: the server stopped on a failure (storage, a raft invariant)
// rather than acknowledge what might not be durable. The process exits
// non-zero (ExitFailStop); a supervisor restarts it.
var ErrFailStop = errors.New("fail-stop")

// ExitFailStop is the exit status of a process that fail-stopped.
const ExitFailStop = 3

// Run starts a server and serves until ctx ends, then shuts down
// gracefully: stop accepting, answer what was read, stop Raft, close logs.
// If the server fail-stops, Run returns an error wrapping ErrFailStop.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	s, err := New(cfg, logger)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	if err := s.Serve(errc); err != nil {
		s.Close()
		return err
	}
	logger.Info("server started", "kafka", cfg.KafkaListen, "raft", cfg.RaftListen, "admin", cfg.AdminListen, "profile", s.cfg.Profile)
	select {
	case <-ctx.Done():
	case err = <-errc:
		logger.Error("listener failed", "err", err)
	case <-s.Failed():
		err = fmt.Errorf("%w: %v", ErrFailStop, s.host.Err())
		logger.Error("server fail-stopped; exiting so a supervisor restarts it", "err", s.host.Err())
	}
	logger.Info("shutting down")
	if cerr := s.Close(); cerr != nil {
		logger.Warn("shutdown", "err", cerr)
	}
	return err
}

// Serve opens the Kafka and admin listeners; listener failures go to errc.
func (s *Server) Serve(errc chan<- error) error {
	ks, err := kafka.NewServer(kafka.Config{Profile: s.cfg.Profile, ClusterID: s.cfg.ClusterID,
		MaxRecordSetBytes: int(s.cfg.Raft.MaxEntryBytes) - 1}, NewBackend(s.host, catalog{s}), s.log)
	if err != nil {
		return err
	}
	kl, err := net.Listen("tcp", s.cfg.KafkaListen)
	if err != nil {
		return fmt.Errorf("kafka listener: %w", err)
	}
	s.kafka = ks
	go func() {
		if err := ks.Serve(kl); err != nil && !errors.Is(err, kafka.ErrServerClosed) {
			errc <- err
		}
	}()
	if s.cfg.AdminListen != "" {
		al, err := net.Listen("tcp", s.cfg.AdminListen)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		s.admin = &http.Server{Handler: s.adminMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := s.admin.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	return nil
}

func (s *Server) streamConfig(name string) (StreamConfig, bool) {
	for _, sc := range s.cfg.Streams {
		if sc.Name == name {
			return sc, true
		}
	}
	return StreamConfig{}, false
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
