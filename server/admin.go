package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
)

// Status is what GET /status returns.
type Status struct {
	NodeID    uint64 `json:"node_id"`
	ClusterID string `json:"cluster_id"`
	DC        string `json:"dc,omitempty"`
	Profile   string `json:"profile"`
	// Total is how many hosted streams matched; Streams the first of them
	// by name, up to the limit asked.
	Total   int            `json:"total"`
	Streams []StreamStatus `json:"streams"`
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
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		limit := 0
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				jsonError(w, http.StatusBadRequest, "limit %q: want a count (0: every stream)", v)
				return
			}
			limit = n
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.StatusOf(r.URL.Query().Get("prefix"), limit))
	})
	mux.HandleFunc("GET /groups", s.handleGroups)
	mux.Handle("GET /metrics", s.metrics.handler())
	mountPprof(mux)
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

// mountPprof serves Go's profiles under /debug/pprof/. They need the admin
// credentials even to read (see authorize): a heap profile shows what the
// server holds, a CPU profile costs the server CPU.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc(pprofPrefix, pprof.Index)
	mux.HandleFunc(pprofPrefix+"cmdline", pprof.Cmdline)
	mux.HandleFunc(pprofPrefix+"profile", pprof.Profile)
	mux.HandleFunc(pprofPrefix+"symbol", pprof.Symbol)
	mux.HandleFunc(pprofPrefix+"trace", pprof.Trace)
}

const pprofPrefix = "/debug/pprof/"

// needsCredentials: the paths that need the admin credentials for every
// method, reads included (the path cleaned as the mux cleans it).
func needsCredentials(r *http.Request) bool {
	p := path.Clean("/" + r.URL.Path)
	return p+"/" == pprofPrefix || strings.HasPrefix(p, pprofPrefix)
}

// authorize guards the admin API: reads (GET, HEAD) are open, except the
// profiles (needsCredentials); anything else changes the cluster and needs
// the bearer token or an operator client certificate of the cluster CA. No
// credentials: 401; credentials of the wrong kind (a node's certificate):
// 403.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !needsCredentials(r) {
			next.ServeHTTP(w, r)
			return
		}
		if s.sec.token != "" {
			if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				if subtle.ConstantTimeCompare([]byte(got), []byte(s.sec.token)) == 1 {
					next.ServeHTTP(w, r)
					return
				}
				jsonError(w, http.StatusUnauthorized, "the admin token is wrong")
				return
			}
		}
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			// An operator, or the config servers (their balancer and
			// replica moves: leader transfers, membership changes).
			if _, ok := pki.Operator(r.TLS.PeerCertificates[0]); ok {
				next.ServeHTTP(w, r)
				return
			}
			if _, ok := pki.ConfigServerID(r.TLS.PeerCertificates[0]); ok && !needsCredentials(r) {
				next.ServeHTTP(w, r)
				return
			}
			jsonError(w, http.StatusForbidden, "%s %s needs an operator certificate; %v is not one", r.Method, r.URL.Path,
				r.TLS.PeerCertificates[0].DNSNames)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="vdl admin"`)
		what := "changes the cluster"
		if needsCredentials(r) {
			what = "reads profiles"
		}
		jsonError(w, http.StatusUnauthorized, "%s %s %s: it needs the admin token (Authorization: Bearer ...) "+
			"or an operator client certificate (docs/security.md)", r.Method, r.URL.Path, what)
	})
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
	if _, ok := s.dir.Peer(to); !ok {
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
func (s *Server) Status() Status { return s.StatusOf("", 0) }

// StatusOf is Status for the hosted streams whose names start with prefix,
// the first limit of them by name (0: all). Every group's state comes from
// one trip to the Raft loop, so it stays fast with thousands of streams.
func (s *Server) StatusOf(prefix string, limit int) Status {
	st := Status{NodeID: s.cfg.NodeID, ClusterID: s.cfg.ClusterID, DC: s.cfg.DC, Profile: s.cfg.Profile, Streams: []StreamStatus{}}
	groups := map[uint64]raftnode.GroupStatus{}
	for _, gs := range s.host.Statuses() {
		groups[gs.Group] = gs
	}
	scs := slices.Clone(s.dir.Streams())
	slices.SortFunc(scs, func(a, b StreamConfig) int { return strings.Compare(a.Name, b.Name) })
	for _, sc := range scs {
		if !strings.HasPrefix(sc.Name, prefix) {
			continue
		}
		str, ok := s.stream(sc.Name)
		if !ok {
			continue
		}
		if st.Total++; limit > 0 && st.Total > limit {
			continue
		}
		gs := groups[sc.ID]
		policy := EffectivePolicy(sc, str.log) // with the replicated overrides
		st.Streams = append(st.Streams, StreamStatus{
			Name:           sc.Name,
			StartOffset:    str.log.StartOffset(),
			EndOffset:      str.log.EndOffset(),
			RetentionMs:    policy.MaxAge,
			RetentionBytes: policy.MaxBytes,
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
	st, ok := s.groupsStatus()
	if !ok {
		http.Error(w, "the kafka listener is not running", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}

// groupsStatus is the consumer groups as this server's coordinator sees
// them, with each committed offset's lag behind this replica's high
// watermark; false before the Kafka listener runs.
func (s *Server) groupsStatus() (kafka.CoordinatorStatus, bool) {
	if s.kafka == nil {
		return kafka.CoordinatorStatus{}, false
	}
	hwm := func(topic string) (int64, bool) {
		st, ok := s.stream(topic)
		if !ok {
			return 0, false
		}
		h, _, ok := s.host.HighWatermark(st.cfg.ID)
		return h, ok
	}
	return s.kafka.Groups().Status(s.kafka.Now(), hwm), true
}
