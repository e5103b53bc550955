package server

import (
	"context"
	"crypto/tls"
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
	var be kafka.Backend = NewBackend(s.host, catalog{s})
	if s.control != nil {
		be = adminBackend{Backend: be.(*Backend), s: s}
	}
	ks, err := kafka.NewServer(kafka.Config{Profile: s.cfg.Profile, ClusterID: s.cfg.ClusterID,
		MaxRecordSetBytes: int(s.cfg.Raft.MaxEntryBytes) - 1, Observer: s.metrics,
		ForwardProducerIDs: s.forwardProducerIDs}, be, s.log)
	if err != nil {
		return err
	}
	s.pids.Store(ks.Groups().ProducerIDs())
	kl, err := net.Listen("tcp", s.cfg.KafkaListen)
	if err != nil {
		return fmt.Errorf("kafka listener: %w", err)
	}
	s.kafka = ks
	serve := func(l net.Listener, lo kafka.Listener) {
		if err := ks.ServeWith(l, lo); err != nil && !errors.Is(err, kafka.ErrServerClosed) {
			errc <- err
		}
	}
	go serve(kl, kafka.Listener{Name: "plain", SASL: s.saslOn("plain")})
	if s.cfg.KafkaTLSListen != "" {
		tl, err := net.Listen("tcp", s.cfg.KafkaTLSListen)
		if err != nil {
			return fmt.Errorf("kafka TLS listener: %w", err)
		}
		go serve(tls.NewListener(tl, s.sec.listenerTLS()), kafka.Listener{Name: "tls", SASL: s.saslOn("tls"), Brokers: catalog{s}.TLSBrokers})
	}
	if s.cfg.AdminListen != "" {
		al, err := net.Listen("tcp", s.cfg.AdminListen)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		if s.sec.secure() {
			al = tls.NewListener(al, s.sec.listenerTLS())
		}
		s.admin = &http.Server{Handler: s.authorize(s.adminMux()), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		go func() {
			if err := s.admin.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	return nil
}

func (s *Server) streamConfig(name string) (StreamConfig, bool) { return s.dir.Stream(name) }

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
