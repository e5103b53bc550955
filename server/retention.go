package server

import (
	"context"
	"time"

	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// Retention policies (retention_ms, retention_bytes): every
// retention_check_ms the leader of each stream asks storage.RetentionPoint
// where the stream may start now and proposes a replicated retention
// command when that moved (every replica deletes the same head segments;
// the apply never goes past the commit). The simulator applies the same
// policy with the same function.

// Policy is a stream's retention policy.
func (sc StreamConfig) Policy() storage.RetentionPolicy {
	return storage.RetentionPolicy{MaxAge: sc.RetentionMs, MaxBytes: sc.RetentionBytes}
}

// RetentionDue returns the retention command a leader should propose for a
// log under policy p at nowMs (Unix ms), committed up to hwm; ok is false
// when the start would not move.
func RetentionDue(l *storage.Log, p storage.RetentionPolicy, nowMs, hwm int64) (data []byte, before int64, ok bool) {
	if p.MaxAge <= 0 && p.MaxBytes <= 0 {
		return nil, 0, false
	}
	before = storage.RetentionPoint(l.Segments(), p, nowMs, hwm)
	if before <= l.StartOffset() {
		return nil, 0, false
	}
	return raftnode.RetainData(before), before, true
}

func (s *Server) runRetention() {
	defer s.wg.Done()
	t := time.NewTicker(time.Duration(s.cfg.Storage.RetentionCheckMs) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.applyRetention(time.Now().UnixMilli())
			s.applyPreferredDC()
		}
	}
}

// parkInterval is how often idle streams' files are handed to the cache:
// a stream written nothing for one to two intervals is parked.
const parkInterval = 5 * time.Second

// runParking parks idle streams' files until the server closes.
func (s *Server) runParking() {
	defer s.wg.Done()
	t := time.NewTicker(parkInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.parkIdle()
		}
	}
}

// parkIdle hands the active segment files of the streams written nothing
// since the last call to the file cache (storage.Log.Park): descriptors
// are then bounded by open_segments, not by the number of streams.
func (s *Server) parkIdle() {
	s.mu.Lock()
	logs := make([]*storage.Log, 0, len(s.opened))
	for _, st := range s.opened {
		logs = append(logs, st.log)
	}
	s.mu.Unlock()
	for _, l := range logs {
		l.Park()
	}
}

// applyRetention proposes the retention due on the streams this server leads.
func (s *Server) applyRetention(nowMs int64) {
	type hostedStream struct {
		cfg StreamConfig // a copy: the config servers may alter a policy meanwhile
		log *storage.Log
	}
	s.mu.Lock()
	var hosted []hostedStream
	for _, st := range s.streams {
		hosted = append(hosted, hostedStream{st.cfg, st.log})
	}
	s.mu.Unlock()
	for _, st := range hosted {
		if !s.host.Readable(st.cfg.ID) {
			continue
		}
		hwm, _, _ := s.host.HighWatermark(st.cfg.ID)
		policy := EffectivePolicy(st.cfg, st.log)
		data, before, ok := RetentionDue(st.log, policy, nowMs, hwm)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		_, err := s.host.Propose(ctx, st.cfg.ID, data)
		cancel()
		if err != nil {
			s.log.Warn("retention policy: proposing the retention failed; retrying at the next check", "stream", st.cfg.Name, "before", before, "err", err)
			continue
		}
		s.log.Info("retention policy applied", "stream", st.cfg.Name, "before", before,
			"retention_ms", policy.MaxAge, "retention_bytes", policy.MaxBytes)
	}
}
