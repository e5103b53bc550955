package configserver

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/pki"
)

// The management API (docs/configserver.md), JSON over HTTPS. Reads are
// open; changes need the operators' bearer token or an operator
// certificate; reports need the reporting server's node certificate (or
// the token). Only the leader serves: a follower answers 307 with the
// leader's address (and the JSON error names it), or 503 when it knows no
// leader.

// maxBody bounds a request body: every port is hostile input.
const maxBody = 1 << 20

// maxReportBody bounds a server's report, which names every group it
// hosts (about 200 bytes each: 10,000 groups are 2 MB). Only a node's or
// an operator's certificate may send one that large. Under the 1 MiB of
// other requests, reports of servers hosting more than about 5,000 groups
// were cut off: they failed, and the servers, unheard, were marked down.
const maxReportBody = 64 << 20

// ClusterStatus is GET /v1/cluster.
type ClusterStatus struct {
	Leader    uint64         `json:"leader"`
	View      string         `json:"view"` // "fresh", or why servers may show unknown
	Servers   []ServerStatus `json:"servers"`
	Streams   int            `json:"streams"`
	Deleting  int            `json:"deleting"`
	Version   int64          `json:"version"`
	LeaderAPI string         `json:"leader_api"`
}

// StreamStatus is a stream with its reported leader (0: unknown).
type StreamStatus struct {
	Stream
	Leader uint64 `json:"leader"`
}

func (s *Service) serveAPI() error {
	ln, err := net.Listen("tcp", s.cfg.APIListen)
	if err != nil {
		return fmt.Errorf("api listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("GET /v1/cluster", s.leaderOnly(s.getCluster))
	mux.HandleFunc("GET /v1/streams", s.leaderOnly(s.listStreams))
	mux.HandleFunc("GET /v1/streams/{name}", s.leaderOnly(s.getStream))
	mux.HandleFunc("GET /v1/ops", s.leaderOnly(s.listOps))
	// Servers create and delete streams for their Kafka clients
	// (CreateTopics, DeleteTopics).
	mux.HandleFunc("POST /v1/streams", s.operatorOrServer(s.leaderOnly(s.createStream)))
	mux.HandleFunc("PATCH /v1/streams/{name}", s.operator(s.leaderOnly(s.alterStream)))
	mux.HandleFunc("DELETE /v1/streams/{name}", s.operatorOrServer(s.leaderOnly(s.deleteStream)))
	mux.HandleFunc("POST /v1/servers/{id}/drain", s.operator(s.leaderOnly(s.setServerState(ServerDraining))))
	mux.HandleFunc("POST /v1/servers/{id}/activate", s.operator(s.leaderOnly(s.setServerState(ServerActive))))
	mux.HandleFunc("POST /v1/report", s.leaderOnly(s.report))
	mux.HandleFunc("GET /v1/moves", s.leaderOnly(s.listMoves))
	mux.HandleFunc("POST /v1/moves", s.operator(s.leaderOnly(s.startMove)))
	mux.HandleFunc("POST /v1/moves/{stream}/cancel", s.operator(s.leaderOnly(s.cancelMove)))
	mux.HandleFunc("GET /v1/configservers", s.leaderOnly(s.listConfigServers))
	mux.HandleFunc("POST /v1/configservers/{id}/remove", s.operator(s.leaderOnly(s.removeConfigServer)))
	mux.HandleFunc("POST /v1/configservers/{id}/add", s.operator(s.leaderOnly(s.addConfigServer)))
	mux.HandleFunc("POST /v1/configservers/{id}/transfer-leader", s.operator(s.leaderOnly(s.transferLeadership)))
	mux.HandleFunc("GET /v1/balancer", s.leaderOnly(func(context.Context, *http.Request) (int, any, error) {
		return http.StatusOK, s.bal.status(), nil
	}))
	// The failpoint build's control plane, behind every other route (a
	// production build mounts nothing, and carries not even its path):
	// reads are open, changes need an operator.
	fp := http.NewServeMux()
	failpoints.Mount(fp)
	mux.Handle("/", s.readOrOperator(fp))
	s.api = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	if s.pool != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12})
	}
	s.apiLn = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.api.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("api", "err", err)
		}
	}()
	s.log.Info("config server API", "addr", ln.Addr().String(), "tls", s.pool != nil)
	return nil
}

type handler func(ctx context.Context, r *http.Request) (int, any, error)

// leaderOnly runs h on the leader (reads after a read barrier) and
// redirects elsewhere.
func (s *Service) leaderOnly(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		err := ErrNotLeader
		if s.noteLeadership() {
			if r.Method == http.MethodGet {
				err = s.readBarrier(ctx)
			} else {
				err = nil
			}
		}
		var code int
		var v any
		if err == nil {
			code, v, err = h(ctx, r)
		}
		if errors.Is(err, ErrNotLeader) {
			s.redirect(w, r)
			return
		}
		if err != nil {
			writeError(w, statusOf(err), err.Error())
			return
		}
		writeJSON(w, code, v)
	}
}

func (s *Service) redirect(w http.ResponseWriter, r *http.Request) {
	addr, ok := s.leaderAPI()
	if !ok || s.Leader() == s.cfg.ID {
		writeError(w, http.StatusServiceUnavailable, "no config server leader right now: retry shortly")
		return
	}
	scheme := "http"
	if s.pool != nil {
		scheme = "https"
	}
	w.Header().Set("Location", scheme+"://"+addr+r.URL.RequestURI())
	writeJSON(w, http.StatusTemporaryRedirect, map[string]any{"error": "not the config servers' leader", "leader": s.Leader(), "leader_api": addr})
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrExists), errors.Is(err, ErrPlacement), errors.Is(err, ErrMembership):
		return http.StatusConflict
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// operator requires the token or an operator certificate for a change.
func (s *Service) operator(next http.HandlerFunc) http.HandlerFunc { return s.allow(next, false) }

// operatorOrServer also lets a server's certificate through.
func (s *Service) operatorOrServer(next http.HandlerFunc) http.HandlerFunc {
	return s.allow(next, true)
}

func (s *Service) allow(next http.HandlerFunc, servers bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if who, ok := s.credentials(r); ok && (who == "operator" || servers && strings.HasPrefix(who, "node ")) {
			next(w, r)
			return
		} else if ok {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s %s needs an operator certificate or the token; %s is not one", r.Method, r.URL.Path, who))
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="vdl config servers"`)
		writeError(w, http.StatusUnauthorized, fmt.Sprintf("%s %s changes the cluster: it needs the token (Authorization: Bearer ...) "+
			"or an operator client certificate (docs/security.md)", r.Method, r.URL.Path))
	}
}

// readOrOperator serves GET and HEAD to anyone, anything else to operators.
func (s *Service) readOrOperator(h http.Handler) http.Handler {
	op := s.operator(h.ServeHTTP)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		op(w, r)
	})
}

// credentials says who the request is: "operator" (the token, an operator
// certificate, or anyone when the config servers run with neither TLS nor
// a token), "node N" (a server's certificate), or nothing.
func (s *Service) credentials(r *http.Request) (string, bool) {
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.token != "" {
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1 {
			return "operator", true
		}
		return "", false
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert := r.TLS.PeerCertificates[0]
		if _, ok := pki.Operator(cert); ok {
			return "operator", true
		}
		if id, ok := pki.NodeID(cert); ok {
			return "node " + strconv.FormatUint(id, 10), true
		}
		return fmt.Sprint(cert.DNSNames), true
	}
	if s.pool == nil && s.token == "" {
		return "operator", true
	}
	return "", false
}

func (s *Service) getCluster(context.Context, *http.Request) (int, any, error) {
	now := time.Now()
	cs := ClusterStatus{Leader: s.cfg.ID, View: "fresh", Servers: s.serverStatuses(now), Version: s.state.Version()}
	cs.LeaderAPI, _ = s.leaderAPI()
	s.soft.mu.Lock()
	if ok, why := s.soft.fresh(now, s.downAfter()); !ok {
		cs.View = why
	}
	s.soft.mu.Unlock()
	for _, st := range s.state.Streams() {
		if st.State == StreamActive {
			cs.Streams++
		} else {
			cs.Deleting++
		}
	}
	return http.StatusOK, cs, nil
}

func (s *Service) streamStatuses() []StreamStatus {
	s.soft.mu.Lock()
	leaders := s.leadersLocked()
	s.soft.mu.Unlock()
	var out []StreamStatus
	for _, st := range s.state.Streams() {
		out = append(out, StreamStatus{Stream: st, Leader: leaders[st.Group]})
	}
	return out
}

func (s *Service) listStreams(context.Context, *http.Request) (int, any, error) {
	return http.StatusOK, s.streamStatuses(), nil
}

func (s *Service) getStream(_ context.Context, r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	for _, st := range s.streamStatuses() {
		if st.Name == name && st.State == StreamActive {
			return http.StatusOK, st, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: stream %q", ErrNotFound, name)
}

func (s *Service) listOps(_ context.Context, r *http.Request) (int, any, error) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n <= 0 || n > 10000 {
		n = 100
	}
	return http.StatusOK, s.state.Ops(n), nil
}

func (s *Service) createStream(ctx context.Context, r *http.Request) (int, any, error) {
	var spec StreamSpec
	if err := decodeBody(r, &spec); err != nil {
		return 0, nil, err
	}
	st, err := s.CreateStream(ctx, spec)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, st, nil
}

// CreateStream validates spec, places the stream on servers that are up
// and creates it.
func (s *Service) CreateStream(ctx context.Context, spec StreamSpec) (*Stream, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	now := time.Now()
	replicas, err := Place(s.candidates(now), spec.ReplicationFactor, spec.PreferredDC)
	if err != nil {
		return nil, err
	}
	out, err := s.propose(ctx, Command{Kind: CmdCreate, At: now.UnixMilli(), Spec: &spec, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	return out.Stream, out.Error()
}

func (s *Service) alterStream(ctx context.Context, r *http.Request) (int, any, error) {
	var ch StreamChange
	if err := decodeBody(r, &ch); err != nil {
		return 0, nil, err
	}
	out, err := s.propose(ctx, Command{Kind: CmdAlter, At: time.Now().UnixMilli(), Name: r.PathValue("name"), Change: &ch})
	if err == nil {
		err = out.Error()
	}
	return http.StatusOK, out.Stream, err
}

func (s *Service) deleteStream(ctx context.Context, r *http.Request) (int, any, error) {
	out, err := s.propose(ctx, Command{Kind: CmdDelete, At: time.Now().UnixMilli(), Name: r.PathValue("name")})
	if err == nil {
		err = out.Error()
	}
	return http.StatusOK, out.Stream, err
}

func (s *Service) setServerState(state string) handler {
	return func(ctx context.Context, r *http.Request) (int, any, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: server id %q", ErrInvalid, r.PathValue("id"))
		}
		out, err := s.propose(ctx, Command{Kind: CmdSetServerState, At: time.Now().UnixMilli(), Node: id, Name: state})
		if err == nil {
			err = out.Error()
		}
		return http.StatusOK, map[string]any{"server": id, "state": state}, err
	}
}

func (s *Service) report(ctx context.Context, r *http.Request) (int, any, error) {
	var rep Report
	who, ok := s.credentials(r)
	if !ok || (who != "operator" && !strings.HasPrefix(who, "node ")) {
		return 0, nil, fmt.Errorf("%w: a report needs a node's certificate (this is %q)", errForbidden, who)
	}
	if err := decodeBodyUpTo(r, &rep, maxReportBody); err != nil {
		return 0, nil, err
	}
	if !ok || (who != "operator" && who != "node "+strconv.FormatUint(rep.Server.ID, 10)) {
		return 0, nil, fmt.Errorf("%w: a report for server %d needs node %d's certificate (this is %q)", errForbidden, rep.Server.ID, rep.Server.ID, who)
	}
	a, err := s.handleReport(ctx, rep)
	return http.StatusOK, a, err
}

// MoveStatus is a move with why it waits (GET /v1/moves).
type MoveStatus struct {
	Move
	Waiting string `json:"waiting,omitempty"`
}

func (s *Service) listMoves(context.Context, *http.Request) (int, any, error) {
	s.soft.mu.Lock()
	defer s.soft.mu.Unlock()
	var out []MoveStatus
	for _, m := range s.state.Moves() {
		ms := MoveStatus{Move: m}
		if m.State == MoveActive {
			ms.Waiting = s.soft.moveNotes[m.Stream]
		}
		out = append(out, ms)
	}
	return http.StatusOK, out, nil
}

func (s *Service) startMove(ctx context.Context, r *http.Request) (int, any, error) {
	var req MoveRequest
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	m, err := s.StartMove(ctx, req)
	return http.StatusAccepted, m, err
}

func (s *Service) cancelMove(ctx context.Context, r *http.Request) (int, any, error) {
	m, err := s.CancelMove(ctx, r.PathValue("stream"))
	return http.StatusAccepted, m, err
}

var errForbidden = errors.New("forbidden")

func decodeBody(r *http.Request, v any) error { return decodeBodyUpTo(r, v, maxBody) }

// decodeBodyUpTo decodes a JSON body of at most limit bytes; a larger one
// is refused with an error that says so (not a truncated-JSON error).
func decodeBodyUpTo(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			return fmt.Errorf("%w: request body larger than %d bytes", ErrInvalid, limit)
		}
		return fmt.Errorf("%w: request body: %v", ErrInvalid, err)
	}
	return nil
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
