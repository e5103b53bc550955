package server

import (
	"encoding/json"
	"net/http"

	"github.com/vdl-project/vdl/failpoints"
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
	Name        string `json:"name"`
	StartOffset int64  `json:"start_offset"`
	EndOffset   int64  `json:"end_offset"`
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
	failpoints.Mount(mux)
	return mux
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
			Name:        sc.Name,
			StartOffset: str.log.StartOffset(),
			EndOffset:   str.log.EndOffset(),
			GroupStatus: gs,
		})
	}
	return st
}
