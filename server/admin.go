package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
)

// Status is what GET /status returns.
type Status struct {
	NodeID    uint64         `json:"node_id"`
	ClusterID string         `json:"cluster_id"`
	DC        string         `json:"dc,omitempty"`
	Profile   string         `json:"profile"`
	Streams   []StreamStatus `json:"streams"`
}

// StreamStatus is one stream as this server sees it.
type StreamStatus struct {
	Name           string `json:"name"`
	StartOffset    int64  `json:"start_offset"`
	EndOffset      int64  `json:"end_offset"`
	RetentionMs    int64  `json:"retention_ms"`
	RetentionBytes int64  `json:"retention_bytes"`
	raftnode.GroupStatus
}

func (s *Server) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.host.Err(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Status())
	})
	mux.HandleFunc("GET /groups", s.handleGroups)
	mux.HandleFunc("GET /internal/raft/{group}/entries", s.handleEntries)
	mux.HandleFunc("POST /streams/{name}/retain", s.handleRetain)
	mux.HandleFunc("POST /streams/{name}/transfer-leader", s.handleTransferLeader)
	mux.HandleFunc("GET /streams/{name}/members", s.handleMembers)
	mux.HandleFunc("POST /streams/{name}/members/{id}", s.handleAddMember)
	mux.HandleFunc("POST /streams/{name}/members/{id}/promote", s.handlePromoteMember)
	mux.HandleFunc("DELETE /streams/{name}/members/{id}", s.handleRemoveMember)
	failpoints.Mount(mux)
	s.mountPowerLoss(mux)
	return mux
}

// handleRetain deletes a stream's head segments below ?before=OFFSET on
// every replica, through a replicated command. Only committed data can be
// deleted: an offset above the high watermark is refused.
func (s *Server) handleRetain(w http.ResponseWriter, r *http.Request) {
	before, err := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	if err != nil || before < 0 {
		jsonError(w, http.StatusBadRequest, "?before= must be a non-negative offset")
		return
	}
	st, _, ok := s.onLeader(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	NewBackend(s.host, catalog{s}).Retain(st.cfg.Name, before, func(err error) { errc <- err })
	select {
	case err = <-errc:
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case errors.Is(err, kafka.ErrRetainAboveHWM):
		jsonError(w, http.StatusBadRequest, "%s: %v", st.cfg.Name, err)
		return
	case err != nil:
		jsonError(w, http.StatusServiceUnavailable, "retention of %s: %v", st.cfg.Name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": fmt.Sprintf("retention before offset %d committed", before),
		"start_offset": st.log.StartOffset()})
}

// handleTransferLeader hands the stream's leadership to ?to=NODE.
func (s *Server) handleTransferLeader(w http.ResponseWriter, r *http.Request) {
	to, err := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
	if err != nil || to == 0 {
		jsonError(w, http.StatusBadRequest, "?to= must be a node id")
		return
	}
	if _, ok := s.cfg.Peer(to); !ok {
		jsonError(w, http.StatusBadRequest, "node %d is not a peer", to)
		return
	}
	st, gs, ok := s.onLeader(w, r)
	if !ok {
		return
	}
	if !slices.Contains(gs.Voters, to) {
		jsonError(w, http.StatusConflict, "node %d is not a voter of %s", to, st.cfg.Name)
		return
	}
	if err := s.host.TransferLeader(st.cfg.ID, to); err != nil {
		jsonError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"result": fmt.Sprintf("leadership transfer of %q to node %d started", st.cfg.Name, to)})
}

// Status reports every hosted stream.
func (s *Server) Status() Status {
	st := Status{NodeID: s.cfg.NodeID, ClusterID: s.cfg.ClusterID, DC: s.cfg.DC, Profile: s.cfg.Profile, Streams: []StreamStatus{}}
	for _, sc := range s.cfg.Streams {
		str, ok := s.stream(sc.Name)
		if !ok {
			continue
		}
		gs, _ := s.host.Status(sc.ID)
		st.Streams = append(st.Streams, StreamStatus{
			Name:           sc.Name,
			StartOffset:    str.log.StartOffset(),
			EndOffset:      str.log.EndOffset(),
			RetentionMs:    sc.RetentionMs,
			RetentionBytes: sc.RetentionBytes,
			GroupStatus:    gs,
		})
	}
	return st
}

// handleGroups shows the consumer groups this server coordinates (it does
// while it leads the offsets stream; otherwise "coordinator" is false and
// the list is empty): members, generations, committed offsets and lag
// (high watermark − committed offset, from this server's replica).
func (s *Server) handleGroups(w http.ResponseWriter, _ *http.Request) {
	if s.kafka == nil {
		http.Error(w, "the kafka listener is not running", http.StatusServiceUnavailable)
		return
	}
	hwm := func(topic string) (int64, bool) {
		st, ok := s.stream(topic)
		if !ok {
			return 0, false
		}
		h, _, ok := s.host.HighWatermark(st.cfg.ID)
		return h, ok
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.kafka.Groups().Status(s.kafka.Now(), hwm))
}
