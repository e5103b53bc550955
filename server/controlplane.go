package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/internal/pki"
)

// A server with config servers (config_servers) starts knowing only them
// and itself: it reports every report_interval_ms and hosts what the
// answer (configserver.Assignment) says — the cluster's servers (its
// peers), every stream (it hosts those naming it), the groups of deleted
// streams to stop and remove. The last assignment is kept in the data dir
// (assignment.json), so a restarted server hosts its streams even while
// the config servers are unreachable: the data path never waits for the
// control plane.

const assignmentFile = "assignment.json"

// Reporting and applying run apart: opening hundreds of newly created
// streams (files, fsyncs) takes seconds, and a server that stopped
// reporting meanwhile would be called down (1,700 streams created at once
// once took every server down this way).
type controlPlane struct {
	client  *configserver.Client
	version atomic.Int64  // the catalog version of the last assignment applied
	kick    chan struct{} // report now (a stream was just created or deleted here)

	mu      sync.Mutex
	applied chan struct{}            // closed after each assignment applied
	pending *configserver.Assignment // answered, not applied yet (the latest)
	ready   chan struct{}            // signalled when pending is set
}

// hand gives the applier an answer, merged into the one it has not taken
// yet: an answer without the catalog (nothing changed since the version
// reported) keeps the pending one's; deletions add up.
func (c *controlPlane) hand(a configserver.Assignment) {
	c.mu.Lock()
	if p := c.pending; p != nil {
		if a.Streams == nil {
			a.Streams, a.Version = p.Streams, p.Version
		}
		if a.Leaders == nil && a.LeadersGen != 0 && a.LeadersGen == p.LeadersGen {
			a.Leaders = p.Leaders // unchanged: the pending answer has them
		}
		for _, g := range p.Deleted {
			if !slices.Contains(a.Deleted, g) {
				a.Deleted = append(a.Deleted, g)
			}
		}
	}
	c.pending = &a
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// take returns the pending answer, if any.
func (c *controlPlane) take() (configserver.Assignment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		return configserver.Assignment{}, false
	}
	a := *c.pending
	c.pending = nil
	return a, true
}

// reportNow makes the loop report at once and waits (up to timeout) until
// an assignment from after the call is applied: the stream this server just
// created is then in its Metadata.
func (c *controlPlane) reportNow(timeout time.Duration) {
	c.mu.Lock()
	ch := c.applied
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	select {
	case <-ch:
	case <-time.After(timeout):
	}
}

func (s *Server) newControlPlane() (*controlPlane, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	secure := s.sec.secure()
	if secure {
		tc := &tls.Config{Certificates: []tls.Certificate{s.sec.cert}, RootCAs: s.sec.pool, MinVersion: tls.VersionTLS12,
			// A config server's certificate, not just any of the CA's:
			// a data server's must not pose as one.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no certificate")
				}
				if _, ok := pki.ConfigServerID(cs.PeerCertificates[0]); !ok {
					return fmt.Errorf("%v is not a config server's certificate", cs.PeerCertificates[0].DNSNames)
				}
				return nil
			}}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	} else if s.sec.token != "" {
		hc.Transport = pki.Bearer{Token: s.sec.token, Next: http.DefaultTransport}
	}
	c := &controlPlane{client: configserver.NewClient(s.cfg.ConfigServers, secure, hc),
		kick: make(chan struct{}, 1), applied: make(chan struct{}), ready: make(chan struct{}, 1)}
	c.version.Store(-1)
	return c, nil
}

// cachedAssignment is the last assignment this data dir applied.
func (s *Server) cachedAssignment() (configserver.Assignment, bool) {
	var a configserver.Assignment
	ok, err := readFile(s.fs, path.Join(s.cfg.DataDir, assignmentFile), &a)
	if err != nil {
		s.log.Warn("the last assignment kept in the data dir is unreadable; waiting for the config servers", "err", err)
	}
	return a, ok && err == nil
}

// runControlPlane reports until the server closes, handing the answers
// to applyAnswers.
func (s *Server) runControlPlane() {
	defer s.wg.Done()
	t := time.NewTicker(time.Duration(s.cfg.ReportIntervalMs) * time.Millisecond)
	defer t.Stop()
	var rep reporter
	for {
		r, cur := rep.next(s.report())
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		a, err := s.control.client.Report(ctx, r)
		cancel()
		switch {
		case err == nil && a.NeedFull:
			rep.lost()
			continue // the full report at once
		case err == nil:
			rep.answered(r, cur, a)
			s.control.hand(a)
		default:
			rep.lost()
			if s.ctx.Err() == nil { // repeats are rate-limited by the log handler (lograte)
				s.log.Warn("config servers: report failed; hosting what was assigned last", "err", err)
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.control.kick:
		}
	}
}

// applyAnswers applies the config servers' latest answer, one at a time,
// until the server closes.
func (s *Server) applyAnswers() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.control.ready:
		}
		a, ok := s.control.take()
		if !ok {
			continue
		}
		if err := s.applyAssignment(a, true); err != nil && s.ctx.Err() == nil {
			s.log.Warn("config servers: assignment not applied in full; retried with the next answer", "err", err)
		}
		s.control.mu.Lock()
		close(s.control.applied)
		s.control.applied = make(chan struct{})
		s.control.mu.Unlock()
	}
}

// self is this server as the config servers know it.
func (s *Server) self() configserver.Server {
	return configserver.Server{ID: s.cfg.NodeID, Kafka: s.cfg.KafkaAdvertise, KafkaTLS: s.cfg.KafkaTLSListen,
		Raft: s.cfg.RaftListen, Admin: s.cfg.AdminListen, DC: s.cfg.DC, Rack: s.cfg.Rack, DirID: s.ident.DirID}
}

// report is this server's report: what it hosts and how it is.
func (s *Server) report() configserver.Report {
	r := configserver.Report{Server: s.self(), Version: s.control.version.Load()}
	statuses := s.host.Statuses()
	r.Groups = make([]configserver.GroupReport, 0, len(statuses))
	for _, gs := range statuses {
		r.Groups = append(r.Groups, configserver.ReportGroup(s.cfg.NodeID, gs))
	}
	if free, err := s.fs.FreeSpace(s.cfg.DataDir); err == nil {
		r.DiskFreeBytes = int64(free)
	}
	r.DiskLow = s.space.Low()
	return r
}

// applyAssignment updates the peers and streams, starts the streams newly
// assigned here and removes deleted ones; save keeps it in the data dir.
func (s *Server) applyAssignment(a configserver.Assignment, save bool) error {
	var peers []Peer
	for _, srv := range a.Servers {
		peers = append(peers, Peer{ID: srv.ID, Raft: srv.Raft, Kafka: srv.Kafka, KafkaTLS: srv.KafkaTLS, Admin: srv.Admin, DC: srv.DC})
		if srv.ID != s.cfg.NodeID {
			s.transport.SetPeer(srv.ID, srv.Raft)
		}
	}
	if !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == s.cfg.NodeID }) {
		peers = append(peers, s.dir.Peers()...) // not registered yet: keep itself
	}
	var streams []StreamConfig
	if a.Streams != nil {
		for _, st := range a.Streams {
			streams = append(streams, s.streamConfigOf(st))
		}
	}
	s.dir.set(peers, streams)
	if a.Leaders != nil || a.LeadersGen == 0 { // nil with a generation: held already
		s.dir.setLeaders(a.Leaders)
	}
	var errs []error
	if a.Streams != nil {
		s.updateHosted(streams)
		errs = append(errs, s.hostAssigned(streams...))
		if errors.Join(errs...) == nil {
			// Otherwise the next report asks for the catalog again, so
			// a stream that could not start is tried again.
			s.control.version.Store(a.Version)
		}
	}
	for _, g := range a.Deleted {
		errs = append(errs, s.removeStream(g))
	}
	if save && a.Streams != nil {
		a.Leaders = nil
		errs = append(errs, writeFile(s.fs, s.cfg.DataDir, assignmentFile, a))
	}
	return joinFew(errs)
}

// streamConfigOf is an assigned stream as this server hosts it: founded
// by the dirs it was placed on, joined by any other.
func (s *Server) streamConfigOf(st configserver.Stream) StreamConfig {
	sc := StreamConfig{Name: st.Name, ID: st.Group, Replicas: slices.Sorted(slices.Values(st.Replicas)),
		RetentionMs: st.RetentionMs, RetentionBytes: st.RetentionBytes, PreferredDC: st.PreferredDC}
	if len(st.Replicas) > 0 {
		sc.PreferredLeader = st.Replicas[0]
	}
	if i := slices.Index(st.Replicas, s.cfg.NodeID); i >= 0 && (i >= len(st.Dirs) || st.Dirs[i] != s.ident.DirID) {
		sc.Join = true
	}
	sc.Founders = st.FoundingVoters()
	if slices.Equal(sc.Founders, sc.Replicas) {
		sc.Founders = sc.Replicas // mostly: one slice kept per hosted stream, not two (neither changes in place)
	}
	return sc
}

// updateHosted takes altered retention policies into the hosted streams.
func (s *Server) updateHosted(streams []StreamConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range streams {
		if st, ok := s.streams[sc.Name]; ok && st.cfg.ID == sc.ID {
			st.cfg.RetentionMs, st.cfg.RetentionBytes, st.cfg.PreferredDC = sc.RetentionMs, sc.RetentionBytes, sc.PreferredDC
		}
	}
}

// concurrentOpens is how many newly assigned streams a server opens at
// once. Opening one is a few small writes and fsyncs (its files, its
// meta, its bootstrap); one at a time, a server opened about 60 a second
// and fell minutes behind 10,000 creates, while the disk syncs many files
// at once nearly as fast as one.
const concurrentOpens = 16

// joinFew joins errs, naming at most the first three and counting the
// rest: an answer about thousands of streams can fail for each of them,
// and a log line with thousands of errors costs more than it tells.
func joinFew(errs []error) error {
	errs = slices.DeleteFunc(slices.Clone(errs), func(err error) bool { return err == nil })
	const shown = 3
	if len(errs) <= shown {
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w\n(and %d more)", errors.Join(errs[:shown]...), len(errs)-shown)
}

// errDiskLow: the data dir is short of space (storage.Space).
var errDiskLow = errors.New("disk short of space")

// hostAssigned opens and starts the assigned streams not opened yet. The
// data dir's identity, which lists the streams it hosts, is written once
// for all of them before any starts (once per stream, it was rewritten
// whole per stream: quadratic in the streams created at once).
func (s *Server) hostAssigned(scs ...StreamConfig) error {
	var errs []error
	var todo []StreamConfig
	var opened []*stream
	var founding []bool
	s.mu.Lock()
	open := make(map[uint64]bool, len(s.opened)) // one set, not a scan per stream: answers carry every stream
	for _, st := range s.opened {
		open[st.cfg.ID] = true
	}
	s.mu.Unlock()
	for _, sc := range scs {
		if !containsID(sc.Replicas, s.cfg.NodeID) || open[sc.ID] {
			continue
		}
		if s.space.Low() {
			// Its files would eat the reserve that lets the hosted
			// streams roll and retention free space; the assignment is
			// tried again with the next answer, and the config servers
			// place new streams elsewhere once they hear the disk is low.
			errs = append(errs, fmt.Errorf("stream %s (group %d) not opened here: %w", sc.Name, sc.ID, errDiskLow))
			continue
		}
		todo = append(todo, sc)
	}
	type result struct {
		st       *stream
		founding bool
		err      error
	}
	results := make([]result, len(todo))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(concurrentOpens, len(todo)) {
		wg.Go(func() {
			for i := range work {
				st, f, err := s.openStream(todo[i], initialised)
				results[i] = result{st, f, err}
			}
		})
	}
	for i := range todo {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, r := range results { // in the answer's order
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		opened, founding = append(opened, r.st), append(founding, r.founding)
	}
	if len(opened) > 0 {
		s.mu.Lock()
		slices.Sort(s.ident.Streams) // opened in any order: saved in one
		s.mu.Unlock()
	}
	if len(opened) == 0 {
		return errors.Join(errs...)
	}
	if err := saveIdentity(s.fs, s.cfg.DataDir, s.ident); err != nil {
		return errors.Join(append(errs, fmt.Errorf("data dir: %w", err))...)
	}
	for i, st := range opened {
		if founding[i] {
			s.wg.Add(1)
			go s.hostWhenFoundersKnown(st)
			continue
		}
		errs = append(errs, s.hostStream(st))
	}
	return errors.Join(errs...)
}

// removeStream stops a deleted stream's group and removes its data: first
// from the identity (a crash then leaves files nobody claims, removed at
// the next assignment), then the files.
func (s *Server) removeStream(group uint64) error {
	s.mu.Lock()
	i := slices.IndexFunc(s.opened, func(st *stream) bool { return st.cfg.ID == group })
	var st *stream
	if i >= 0 {
		st = s.opened[i]
		st.removed = true
		s.opened = slices.Delete(s.opened, i, i+1)
		if s.streams[st.cfg.Name] == st {
			delete(s.streams, st.cfg.Name)
		}
		delete(s.byGroup, group)
	}
	s.mu.Unlock()
	if st != nil {
		if err := s.host.RemoveGroup(group); err != nil {
			return err
		}
		_ = st.log.Close()
	}
	if k := slices.Index(s.ident.Streams, group); k >= 0 {
		s.ident.Streams = slices.Delete(s.ident.Streams, k, k+1)
		if err := saveIdentity(s.fs, s.cfg.DataDir, s.ident); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	dir := path.Join(s.cfg.DataDir, "streams", fmt.Sprintf("%d", group))
	if err := removeAll(s, dir); err != nil {
		return fmt.Errorf("removing deleted group %d: %w", group, err)
	}
	if st != nil {
		s.log.Info("stream deleted: its group stopped and its data removed", "stream", st.cfg.Name, "group", group)
	}
	return nil
}

// removeAll removes dir and what it holds (the file system has no
// recursive remove: stream dirs hold only files).
func removeAll(s *Server, dir string) error {
	names, err := s.fs.List(dir)
	if err != nil {
		return nil // nothing there
	}
	for _, n := range names {
		if err := s.fs.Remove(path.Join(dir, n)); err != nil {
			return err
		}
	}
	if err := s.fs.Remove(dir); err != nil {
		return err
	}
	return s.fs.SyncDir(path.Dir(dir))
}
