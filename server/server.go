package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/internal/pki"
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
	pids      atomic.Pointer[kafka.ProducerIDs] // set with kafka: the peers' HTTP serves before it
	admin     *http.Server
	adminLn   net.Listener
	metrics   *metrics

	ident      Identity
	dir        *directory    // peers and streams: configured, or from the config servers
	control    *controlPlane // nil without config servers
	sec        *security
	users      *userStore   // Kafka SASL users; nil without [sasl]
	peerClient *http.Client // the peers' HTTP (peerHTTP)
	peers      *peerBook
	space      *storage.Space
	files      *storage.FileCache  // closed segments' file handles, shared by the streams
	tailBudget *storage.TailBudget // the streams' tail caches' memory, shared by recency
	readBudget *storage.ReadBudget // the streams' catch-up reads' disk IO
	dirOps     chan func()         // peer bookkeeping of membership changes, in order

	// ctx ends when the server closes (snapshot entry copies, waits).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	streams map[string]*stream // hosted, by name
	byGroup map[uint64]*stream
	opened  []*stream                    // every log opened, hosted or still waiting
	members map[uint64]*raftpb.ConfState // hosted groups' membership
	closed  bool
	// durabilityViolations: what the failpoint build's durability check
	// found lost after a power loss (powerloss_failpoint.go).
	durabilityViolations []string
}

// stream is a hosted log stream: its Raft group and its log.
type stream struct {
	cfg     StreamConfig
	log     *storage.Log
	traffic *streamTraffic
	removed bool // deleted through the config servers (under Server.mu)
	// floor is the highest retention point this server saw committed
	// (Backend.Retain): reads respect it at once, before the storage
	// pipeline has applied the command (DeleteRecords' "at once").
	floor atomic.Int64
}

// New opens the data dir (refusing another cluster's or node's), opens
// every configured stream's log (bootstrapping or joining new ones, see
// openStream) and starts replication; Serve starts the client-facing
// listeners.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	fsys, err := dataFS(cfg)
	if err != nil {
		return nil, err
	}
	return newServer(cfg, logger, fsys)
}

// newServer is New on a file system of the caller's (tests: vfs.Mem).
func newServer(cfg Config, logger *slog.Logger, fsys vfs.FS) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: logger, fs: fsys, streams: map[string]*stream{}, byGroup: map[uint64]*stream{},
		dirOps: make(chan func(), 64), metrics: newMetrics(), dir: newDirectory(cfg.Peers, cfg.Streams)}
	s.metrics.reg.MustRegister(newRaftCollector(s), newGroupCollector(s), newStreamCollector(s))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	sec, err := loadSecurity(&cfg)
	if err != nil {
		return nil, err
	}
	s.sec = sec
	if cfg.SASL.UsersFile != "" {
		if s.users, err = openUserStore(cfg.SASL.UsersFile, logger); err != nil {
			return nil, err
		}
	}
	if !sec.secure() {
		logger.Warn("insecure_peers: the raft listener is plain text and unauthenticated; whoever reaches it can forge raft messages")
	}
	mode, err := s.initIdentity()
	if err != nil {
		return nil, err
	}
	if s.peers, err = loadPeerBook(s.fs, cfg.DataDir, logger); err != nil {
		return nil, err
	}
	s.space = storage.NewSpace(s.fs, cfg.DataDir, max(cfg.Storage.ReservedBytes, 0))
	s.space.OnChange = s.spaceChanged
	s.files = storage.NewFileCache(cfg.Storage.OpenSegments)
	tail := cfg.Storage.TailCacheBytes
	if tail <= 0 { // a Config that did not go through Validate
		tail = defaultTailBudget()
	}
	s.tailBudget = storage.NewTailBudget(tail)
	s.readBudget = storage.NewReadBudget(cfg.Storage.CatchUpReadBytes, cfg.Storage.CatchUpReadBytesPerSec, !cfg.Storage.CatchUpReadsNoYield)
	s.metrics.watchReadBudget(s.readBudget)
	s.wg.Add(1)
	go s.runDirOps()
	peers := map[uint64]string{}
	for _, p := range cfg.Peers {
		peers[p.ID] = p.Raft
	}
	tc := transport.Config{
		NodeID:         cfg.NodeID,
		ClusterID:      clusterHash(cfg.ClusterID),
		DirID:          s.ident.DirID,
		CheckPeer:      s.peers.check,
		ListenAddr:     cfg.RaftListen,
		Peers:          peers,
		Handler:        s.stepRaft,
		Unreachable:    func(g, p uint64) { s.host.ReportUnreachable(g, p) },
		SnapshotStatus: func(g, p uint64, failed bool) { s.host.ReportSnapshot(g, p, !failed) },
		MaxFrameBytes:  raftnode.MaxFrameBytes(cfg.Raft.MaxEntryBytes, 0),
		HTTP:           s.peerMux(),
		Logger:         logger.With("component", "transport"),
	}
	if sec.secure() {
		tc.TLSServer, tc.TLSClient, tc.PeerID = sec.peerServer(), sec.peerClient, pki.NodeID
	}
	s.transport = transport.New(tc)
	s.peerClient = s.peerHTTP()
	s.host = raftnode.NewHost(raftnode.HostConfig{
		Core: raftnode.Config{
			ID:                  cfg.NodeID,
			ElectionTick:        cfg.Raft.ElectionTicks,
			HeartbeatTick:       cfg.Raft.HeartbeatTicks,
			MaxUncommittedBytes: cfg.Raft.MaxUncommittedBytes,
			MaxEntryBytes:       cfg.Raft.MaxEntryBytes,
			SyncWrites:          cfg.Raft.SyncWrites,
			// The same on every server (docs/kafka.md "Idempotent producers").
			ProducerExpirationMs: cfg.ProducerIDExpirationMs,
			NoQuiesce:            !cfg.Raft.quiesce(),
			MaxCampaigns:         cfg.Raft.MaxCampaigns,
		},
		TickInterval:       time.Duration(cfg.Raft.TickMillis) * time.Millisecond,
		Sender:             peerSender{s},
		Fetch:              s.fetchEntries,
		CatchupBytesPerSec: cfg.Moves.CatchupBytesPerSec,
		Logger:             logger,
		OnMembership:       s.onMembership,
		ObserveWrite:       func(d time.Duration) { s.metrics.writeSeconds.Observe(d.Seconds()) },
		ObserveSync:        func(d time.Duration) { s.metrics.syncSeconds.Observe(d.Seconds()) },
		ObserveCommit:      func(d time.Duration) { s.metrics.commitSeconds.Observe(d.Seconds()) },
		ObserveRoundTrip: func(peer uint64, d time.Duration) {
			s.metrics.appendRoundTrip.WithLabelValues(strconv.FormatUint(peer, 10)).Observe(d.Seconds())
		},
		ObserveDurable: func(d time.Duration) { s.metrics.appendDurable.Observe(d.Seconds()) },
		ObserveInstall: func(err error) {
			result := "ok"
			if err != nil {
				result = "failed"
			}
			s.metrics.installs.WithLabelValues(result).Inc()
		},
	})
	streams := cfg.Streams
	if len(cfg.ConfigServers) > 0 {
		if s.control, err = s.newControlPlane(); err != nil {
			return nil, err
		}
		if a, ok := s.cachedAssignment(); ok {
			// Restart with what was assigned last; founders that lost
			// their data dir are refused above (openStream).
			for _, st := range a.Streams {
				streams = append(streams, s.streamConfigOf(st))
			}
			s.dir.set(nil, streams)
			s.control.version.Store(a.Version)
		}
	}
	var waiting []*stream
	opened, err := s.openAll(streams, mode)
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, o := range opened {
		if o.founding {
			waiting = append(waiting, o.st)
		} else if err := s.hostStream(o.st); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := saveIdentity(s.fs, cfg.DataDir, s.ident); err != nil {
		s.Close()
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := s.transport.Start(); err != nil {
		s.Close()
		return nil, fmt.Errorf("raft listener: %w", err)
	}
	_ = s.host.Hello() // what the streams said while the transport was down did not go out
	for _, st := range waiting {
		s.wg.Add(1)
		go s.hostWhenFoundersKnown(st)
	}
	s.wg.Add(3)
	go s.runRetention()
	go s.watchSpace()
	go s.runParking()
	if s.control != nil {
		s.wg.Add(2)
		go s.runControlPlane()
		go s.applyAnswers()
	}
	return s, nil
}

// startMode is what an empty data dir is for.
type startMode int

const (
	initialised startMode = iota // the data dir was initialised before
	founding                     // a new data dir founding the cluster
	joining                      // a new data dir joining a running cluster
)

// initIdentity reads the data dir's identity, or initialises the dir.
func (s *Server) initIdentity() (startMode, error) {
	dir := s.cfg.DataDir
	if err := s.fs.MkdirAll(dir); err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	id, ok, err := loadIdentity(s.fs, dir)
	if err != nil {
		return 0, err
	}
	if ok {
		s.ident = id
		return initialised, id.check(s.cfg.ClusterID, s.cfg.NodeID, dir)
	}
	// A data dir from before identities has stream logs: adopt it.
	var legacy []uint64
	names, _ := s.fs.List(path.Join(dir, "streams"))
	for _, name := range names {
		var g uint64
		if _, err := fmt.Sscan(name, &g); err == nil && g != 0 {
			legacy = append(legacy, g)
		}
	}
	s.ident = Identity{ClusterID: s.cfg.ClusterID, NodeID: s.cfg.NodeID, DirID: newDirID(), Streams: legacy}
	if err := saveIdentity(s.fs, dir, s.ident); err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	mode := joining
	switch {
	case len(legacy) > 0:
		mode = initialised
	case s.cfg.InitialClusterState == "new":
		mode = founding
	}
	s.log.Info("data dir initialised", "dir", dir, "dir_id", fmt.Sprintf("%016x", s.ident.DirID),
		"mode", map[startMode]string{initialised: "adopted", founding: "founding a new cluster", joining: "joining a running cluster"}[mode])
	return mode, nil
}

// hostStream starts the stream's Raft group.
func (s *Server) hostStream(st *stream) error {
	sc, l := st.cfg, st.log
	_, cs, err := l.InitialState()
	if err != nil {
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	s.peers.hosted(sc.ID, cs)
	if err := s.host.AddGroup(sc.ID, l); err != nil {
		return fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	s.mu.Lock()
	s.streams[sc.Name] = st
	s.byGroup[sc.ID] = st
	s.mu.Unlock()
	s.log.Info("stream opened", "stream", sc.Name, "group", sc.ID, "voters", cs.GetVoters(), "learners", cs.GetLearners(),
		"start_offset", l.StartOffset(), "end_offset", l.EndOffset())
	return nil
}

// hostWhenFoundersKnown starts a group that has never replicated once the
// data dir of every founding replica is known: a founder that lost its
// disk before another founder ever heard from it would otherwise be
// trusted with a vote it no longer remembers. A new cluster starts when
// all its founding servers are up.
func (s *Server) hostWhenFoundersKnown(st *stream) {
	defer s.wg.Done()
	_, cs, _ := st.log.InitialState()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	warned := time.Now()
	for {
		var missing []uint64
		for _, id := range cs.GetVoters() {
			if id != s.cfg.NodeID && !s.peers.known(id) {
				missing = append(missing, id)
			}
		}
		s.mu.Lock()
		removed := st.removed
		s.mu.Unlock()
		if removed {
			return
		}
		if len(missing) == 0 {
			if err := s.hostStream(st); err != nil && s.ctx.Err() == nil {
				s.log.Error("cannot start stream", "stream", st.cfg.Name, "err", err)
			} else if st.cfg.PreferredLeader == s.cfg.NodeID {
				_ = s.host.Campaign(st.cfg.ID) // the placement's leader first
			}
			return
		}
		if time.Since(warned) > 10*time.Second {
			warned = time.Now()
			s.log.Warn("new stream waits for its founding replicas to connect (all must be up to found it)",
				"stream", st.cfg.Name, "missing", missing)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// onMembership is told every membership change a hosted group applies (on
// the Host's loop: the bookkeeping runs on dirOps, in order).
func (s *Server) onMembership(group uint64, cs *raftpb.ConfState, context []byte) {
	select {
	case s.dirOps <- func() {
		if err := s.peers.applied(s.cfg.NodeID, group, cs, context); err != nil {
			s.log.Error("cannot record a membership change's peers", "group", group, "err", err)
		}
	}:
	case <-s.ctx.Done():
	}
}

func (s *Server) runDirOps() {
	defer s.wg.Done()
	for {
		select {
		case f := <-s.dirOps:
			f()
		case <-s.ctx.Done():
			return
		}
	}
}

// membership returns a hosted group's voters and learners.
func (s *Server) membership(group uint64) (voters, learners []uint64, ok bool) {
	return s.peers.members(group)
}

// watchSpace checks the data dir's space reserve twice a second (rolls
// check it too); spaceChanged tells the host whether it is short of space
// (then user produces are refused with KAFKA_STORAGE_ERROR until space is
// freed).
func (s *Server) watchSpace() {
	defer s.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		s.space.Check()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stepRaft hands a peer's message to raft, unless it comes from a peer
// that lost its data dir and is not heard (Roster.Hears).
func (s *Server) stepRaft(group uint64, m *raftpb.Message) {
	if !s.peers.hears(m.GetFrom(), m.GetType()) {
		return
	}
	s.host.Step(group, m)
}

// peerSender sends raft's messages through the transport, except those a
// peer that lost its data dir must not be told (Roster.Tells). Each goes
// out only to the data dir it was decided for (Roster.Addressee): the
// transport may hold it while the stream is down and write it on the next
// connection, to a process that restarted on an empty disk since.
type peerSender struct{ s *Server }

func (p peerSender) Send(group uint64, m *raftpb.Message) {
	ok, dir := p.s.peers.tells(m.GetTo(), group, m.GetType())
	switch {
	case ok:
		p.s.transport.SendTo(group, m, dir)
	case m.GetType() == raftpb.MsgSnap:
		// Raft waits for a snapshot's outcome: report it (off the host's
		// loop, which is sending).
		go p.s.host.ReportSnapshot(group, m.GetTo(), false)
	}
}

func (s *Server) spaceChanged(low bool) {
	s.host.SetDiskFull(low)
	if low {
		s.log.Error("disk short of space: produces are refused (KAFKA_STORAGE_ERROR) until retention or an operator frees space", "dir", s.cfg.DataDir)
	} else {
		s.log.Info("disk space is back: produces are accepted again", "dir", s.cfg.DataDir)
	}
}

// Host returns the Raft host.
func (s *Server) Host() *raftnode.Host { return s.host }

// Failed is closed when the server fail-stopped (storage, a raft
// invariant): the process must exit and be restarted.
func (s *Server) Failed() <-chan struct{} { return s.host.Failed() }

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
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
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
	s.wg.Wait()
	s.mu.Lock()
	for _, st := range s.opened {
		if err := st.log.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.streams = map[string]*stream{}
	s.mu.Unlock()
	return errors.Join(errs...)
}

func containsID(ids []uint64, id uint64) bool { return slices.Contains(ids, id) }

func clusterHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}
