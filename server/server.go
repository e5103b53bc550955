package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/transport"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// Server is one VDL server process.
type Server struct {
	cfg       Config
	log       *slog.Logger
	fs        vfs.FS
	host      *raftnode.Host
	transport *transport.Transport
	kafka     *kafka.Server
	admin     *http.Server
	adminLn   net.Listener

	// ctx ends when the server closes (snapshot entry copies stop).
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	streams map[string]*stream // by name
	byGroup map[uint64]*stream
}

// stream is a hosted log stream: its Raft group and its log.
type stream struct {
	cfg StreamConfig
	log *storage.Log
}

// New opens every configured stream's log (bootstrapping new ones) and
// starts replication; Serve starts the client-facing listeners.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: logger, fs: vfs.OS{}, streams: map[string]*stream{}, byGroup: map[uint64]*stream{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	peers := map[uint64]string{}
	for _, p := range cfg.Peers {
		peers[p.ID] = p.Raft
	}
	s.transport = transport.New(transport.Config{
		NodeID:         cfg.NodeID,
		ClusterID:      clusterHash(cfg.ClusterID),
		ListenAddr:     cfg.RaftListen,
		Peers:          peers,
		Handler:        func(g uint64, m *raftpb.Message) { s.host.Step(g, m) },
		Unreachable:    func(g, p uint64) { s.host.ReportUnreachable(g, p) },
		SnapshotStatus: func(g, p uint64, failed bool) { s.host.ReportSnapshot(g, p, !failed) },
		Logger:         logger.With("component", "transport"),
	})
	s.host = raftnode.NewHost(raftnode.HostConfig{
		Core: raftnode.Config{
			ID:                  cfg.NodeID,
			ElectionTick:        cfg.Raft.ElectionTicks,
			HeartbeatTick:       cfg.Raft.HeartbeatTicks,
			MaxUncommittedBytes: cfg.Raft.MaxUncommittedBytes,
			SyncWrites:          cfg.Raft.SyncWrites,
		},
		TickInterval: time.Duration(cfg.Raft.TickMillis) * time.Millisecond,
		Sender:       s.transport,
		Fetch:        s.fetchEntries,
		Logger:       logger,
	})
	for _, sc := range cfg.Streams {
		if !containsID(sc.Replicas, cfg.NodeID) {
			continue
		}
		if err := s.openStream(sc); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.transport.Start(); err != nil {
		s.Close()
		return nil, fmt.Errorf("raft listener: %w", err)
	}
	return s, nil
}

func (s *Server) openStream(sc StreamConfig) error {
	dir := filepath.Join(s.cfg.DataDir, "streams", fmt.Sprintf("%d", sc.ID))
	l, err := storage.Open(storage.Options{
		FS:             s.fs,
		Dir:            dir,
		Stream:         sc.ID,
		SegmentSize:    s.cfg.Storage.SegmentBytes,
		TailCacheBytes: s.cfg.Storage.TailCacheBytes,
		KeepPageCache:  s.cfg.Storage.KeepPageCache,
		Logger:         s.log.With("stream", sc.Name),
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	if _, cs, err := l.InitialState(); err == nil && len(cs.GetVoters()) == 0 && !sc.Join {
		if err := l.Bootstrap(&raftpb.ConfState{Voters: sc.Replicas}); err != nil {
			_ = l.Close()
			return fmt.Errorf("stream %s: bootstrap: %w", sc.Name, err)
		}
	}
	if err := s.host.AddGroup(sc.ID, l); err != nil {
		_ = l.Close()
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	st := &stream{cfg: sc, log: l}
	s.mu.Lock()
	s.streams[sc.Name] = st
	s.byGroup[sc.ID] = st
	s.mu.Unlock()
	s.log.Info("stream opened", "stream", sc.Name, "group", sc.ID, "replicas", sc.Replicas,
		"start_offset", l.StartOffset(), "end_offset", l.EndOffset())
	return nil
}

// Host returns the Raft host.
func (s *Server) Host() *raftnode.Host { return s.host }

// Propose appends Kafka batches to a stream through Raft and waits.
func (s *Server) Propose(ctx context.Context, name string, batches []byte) (raftnode.Result, error) {
	st, ok := s.stream(name)
	if !ok {
		return raftnode.Result{}, fmt.Errorf("unknown stream %q", name)
	}
	return s.host.Propose(ctx, st.cfg.ID, raftnode.UserData(batches))
}

func (s *Server) stream(name string) (*stream, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[name]
	return st, ok
}

// Close stops everything and closes the logs. Pending produces end with an
// unknown outcome for their clients.
func (s *Server) Close() error {
	s.cancel()
	var errs []error
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		errs = append(errs, s.admin.Shutdown(ctx))
		cancel()
	}
	if s.kafka != nil {
		errs = append(errs, s.kafka.Close())
	}
	if s.transport != nil {
		errs = append(errs, s.transport.Close())
	}
	if s.host != nil {
		s.host.Stop()
	}
	s.mu.Lock()
	for _, st := range s.streams {
		errs = append(errs, st.log.Close())
	}
	s.streams = map[string]*stream{}
	s.mu.Unlock()
	return errors.Join(errs...)
}

func peerIDs(peers []Peer) []uint64 {
	ids := make([]uint64, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	return ids
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func clusterHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}
