package configserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/raftnode/transport"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// Config is a config server's configuration (TOML, `vdl configserver`).
type Config struct {
	ID         uint64 `toml:"id"`
	ClusterID  string `toml:"cluster_id"`
	DataDir    string `toml:"data_dir"`
	RaftListen string `toml:"raft_listen"`
	APIListen  string `toml:"api_listen"`
	// Peers are the config servers, this one included.
	Peers []Peer `toml:"peers"`
	// TLS: this config server's certificate (config-<id>.vdl, `vdl certs
	// --config-servers`), the cluster CA; or insecure = true (plain text,
	// unauthenticated: a trusted network only).
	CAFile    string `toml:"ca_file"`
	CertFile  string `toml:"cert_file"`
	KeyFile   string `toml:"key_file"`
	Insecure  bool   `toml:"insecure"`
	TokenFile string `toml:"token_file"` // the operators' bearer token
	// DownAfterMs: a server not heard from for this long is down (10000).
	DownAfterMs int `toml:"down_after_ms"`
	// TickMs is the Raft tick (100).
	TickMs int `toml:"tick_ms"`
	// BalanceAfterMs is how long a stream's leader may stay outside its
	// preferred DC before the balancer moves it back (10000), and how long
	// the balancer leaves a stream alone after a transfer.
	// MaxTransfersPerSec bounds its leader transfers (50: 1,000 leaders
	// back in their DC within a minute of its heal; BenchmarkDCHeal).
	BalanceAfterMs     int `toml:"balance_after_ms"`
	MaxTransfersPerSec int `toml:"max_transfers_per_sec"`
	// MaxMoves bounds the replica moves a drain runs at once (4).
	MaxMoves int `toml:"max_moves"`
	// InitialClusterState says what an empty data dir is for: "new" (the
	// default: found the config servers' group with every peer as a
	// voter, once every peer accepted this data dir) or "existing" (join
	// a running group: start empty and wait to be added). An initialised
	// data dir ignores it (identity.go).
	InitialClusterState string `toml:"initial_cluster_state"`
	// CompactAfter: the leader compacts the command log once more than
	// this many commands are applied past its start (10000; -1: never).
	// LogSegmentBytes is the command log's segment size (64 MiB): only
	// whole segments are deleted (compact.go).
	CompactAfter    int   `toml:"compact_after"`
	LogSegmentBytes int64 `toml:"log_segment_bytes"`
}

// Peer is one config server.
type Peer struct {
	ID   uint64 `toml:"id"`
	Raft string `toml:"raft"`
	API  string `toml:"api"` // host:port of its management API
}

// group is the config servers' Raft group id.
const group = 1

func (c *Config) validate() error {
	var errs []error
	if c.ID == 0 {
		errs = append(errs, errors.New("id must be set and non-zero"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir must be set"))
	}
	if c.ClusterID == "" {
		c.ClusterID = "vdl"
	}
	if c.DownAfterMs <= 0 {
		c.DownAfterMs = 10000
	}
	if c.TickMs <= 0 {
		c.TickMs = 100
	}
	if c.BalanceAfterMs <= 0 {
		c.BalanceAfterMs = 10000
	}
	if c.MaxTransfersPerSec <= 0 {
		c.MaxTransfersPerSec = 50
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = 4
	}
	if c.CompactAfter == 0 {
		c.CompactAfter = 10000
	}
	switch c.InitialClusterState {
	case "":
		c.InitialClusterState = "new"
	case "new", "existing":
	default:
		errs = append(errs, fmt.Errorf("initial_cluster_state %q: want new or existing", c.InitialClusterState))
	}
	if !slices.ContainsFunc(c.Peers, func(p Peer) bool { return p.ID == c.ID }) {
		errs = append(errs, fmt.Errorf("peers must include this config server (id %d)", c.ID))
	}
	set := c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
	if !set && !c.Insecure {
		errs = append(errs, errors.New("tls: set ca_file, cert_file and key_file (vdl certs --config-servers), or insecure = true"))
	}
	return errors.Join(errs...)
}

// Service is one running config server.
type Service struct {
	cfg   Config
	log   *slog.Logger
	state *State
	slog  *storage.Log
	host  *raftnode.Host
	tr    *transport.Transport
	api   *http.Server
	apiLn net.Listener

	pool  *x509.CertPool // nil when insecure
	cert  tls.Certificate
	token string

	applied chan struct{} // closed and replaced whenever the state advances
	appMu   sync.Mutex

	ident Identity  // the data dir's identity (identity.go)
	mode  startMode // what the data dir is for at this start
	peers *peerDirs // the other config servers' data dirs

	soft       *softState   // the leader's view of the servers (reports)
	bal        *balancer    // the leader's balancing state
	serverHTTP *http.Client // to the servers' admin API
	peerHTTP   *http.Client // to the other config servers' raft listener
	memberMu   sync.Mutex   // one membership change at a time (members.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start opens the state and the log, joins the config servers' Raft group
// and serves the API.
func Start(cfg Config, logger *slog.Logger) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Service{cfg: cfg, log: logger, applied: make(chan struct{}), soft: newSoftState(), bal: newBalancer()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.loadSecurity(); err != nil {
		return nil, err
	}
	s.serverHTTP = s.newServerHTTP()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.mode, err = s.initIdentity(); err != nil {
		return nil, err
	}
	if s.peers, err = loadPeerDirs(cfg.DataDir); err != nil {
		return nil, err
	}
	if s.state, err = OpenState(filepath.Join(cfg.DataDir, "state.db")); err != nil {
		return nil, err
	}
	if err := s.openLog(); err != nil {
		s.state.Close()
		return nil, err
	}
	if err := s.startRaft(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.serveAPI(); err != nil {
		s.Close()
		return nil, err
	}
	s.wg.Add(2)
	go s.runApplier()
	go s.runLeaderDuties()
	return s, nil
}

func (s *Service) loadSecurity() error {
	if s.cfg.TokenFile != "" {
		b, err := os.ReadFile(s.cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		s.token = strings.TrimSpace(string(b))
	}
	if s.cfg.CertFile == "" {
		return nil
	}
	pool, err := pki.Pool(s.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if id, ok := pki.ConfigServerID(leaf); !ok || id != s.cfg.ID {
		return fmt.Errorf("tls: %s is not config server %d's certificate (it names %v)", s.cfg.CertFile, s.cfg.ID, leaf.DNSNames)
	}
	s.pool, s.cert = pool, cert
	return nil
}

// openLog opens the command log. A founding data dir bootstraps it once
// every other config server accepted it (foundWhenPeersAccept); a joining
// one leaves it empty.
func (s *Service) openLog() error {
	dir := filepath.Join(s.cfg.DataDir, "log")
	l, err := storage.Open(storage.Options{FS: vfs.OS{}, Dir: dir, Stream: group, SegmentSize: s.cfg.LogSegmentBytes, Logger: s.log})
	if err != nil {
		return fmt.Errorf("config log: %w", err)
	}
	s.slog = l
	if err := s.checkStateCoversLog(); err != nil {
		_ = l.Close()
		s.slog = nil
		return err
	}
	return nil
}

func (s *Service) startRaft() error {
	peers := map[uint64]string{}
	for _, p := range s.cfg.Peers {
		peers[p.ID] = p.Raft
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.cfg.ClusterID + "/config-servers"))
	tc := transport.Config{
		NodeID:         s.cfg.ID,
		ClusterID:      h.Sum64(),
		ListenAddr:     s.cfg.RaftListen,
		Peers:          peers,
		Handler:        func(g uint64, m *raftpb.Message) { s.host.Step(g, m) },
		Unreachable:    func(g, p uint64) { s.host.ReportUnreachable(g, p) },
		SnapshotStatus: func(g, p uint64, failed bool) { s.host.ReportSnapshot(g, p, !failed) },
		Logger:         s.log.With("component", "transport"),
		DirID:          s.ident.DirID,
		CheckPeer:      s.peers.check,
		HTTP:           s.peerMux(),
	}
	if s.pool != nil {
		tc.TLSServer = &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool, MinVersion: tls.VersionTLS13}
		tc.TLSClient = func(peer uint64) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{s.cert}, RootCAs: s.pool, ServerName: pki.ConfigServerName(peer),
				MinVersion: tls.VersionTLS13}
		}
		tc.PeerID = pki.ConfigServerID
	}
	s.tr = transport.New(tc)
	s.peerHTTP = s.newPeerHTTP()
	s.host = raftnode.NewHost(raftnode.HostConfig{
		Core:         raftnode.Config{ID: s.cfg.ID, ElectionTick: 10, HeartbeatTick: 1},
		TickInterval: time.Duration(s.cfg.TickMs) * time.Millisecond,
		Sender:       s.tr,
		Logger:       s.log,
		Fetch:        s.fetchEntries,
		OnMembership: s.onMembership,
	})
	if s.mode == founding {
		if err := s.tr.Start(); err != nil {
			return err
		}
		s.wg.Add(1)
		go s.foundWhenPeersAccept()
		return nil
	}
	if err := s.host.AddGroup(group, s.slog); err != nil {
		return err
	}
	return s.tr.Start()
}

// Close stops the config server.
func (s *Service) Close() error {
	s.cancel()
	var errs []error
	if s.api != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		errs = append(errs, s.api.Shutdown(ctx))
		cancel()
	}
	if s.tr != nil {
		errs = append(errs, s.tr.Close())
	}
	if s.host != nil {
		s.host.Stop()
	}
	s.wg.Wait()
	if s.slog != nil {
		errs = append(errs, s.slog.Close())
	}
	errs = append(errs, s.state.Close())
	return errors.Join(errs...)
}

// APIAddr is the API listener's address.
func (s *Service) APIAddr() string { return s.apiLn.Addr().String() }

// Leader is the config servers' leader as this one knows it (0: none).
func (s *Service) Leader() uint64 {
	l, _ := s.host.Leader(group)
	return l
}

// isLeader: this config server leads and may serve reads.
func (s *Service) isLeader() bool {
	return s.Leader() == s.cfg.ID && s.host.Readable(group)
}

// leaderAPI is the leader's API address, if known.
func (s *Service) leaderAPI() (string, bool) {
	l := s.Leader()
	for _, p := range s.cfg.Peers {
		if p.ID == l {
			return p.API, true
		}
	}
	return "", false
}
