package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Producer ids (InitProducerId) are allocated in blocks by the offsets
// stream's leader (kafka.ProducerIDs): a server that does not lead it asks
// the leader over the peers' HTTP, POST /internal/producer-ids on its raft
// listener (mutual TLS, peers only), which answers the first id of a new
// block (text) once the block's record is committed.

const producerIDsTimeout = 10 * time.Second

// handleProducerIDs allocates a block for a peer.
func (s *Server) handleProducerIDs(w http.ResponseWriter, r *http.Request) {
	pids := s.pids.Load()
	if pids == nil {
		http.Error(w, "the Kafka front end is not running", http.StatusServiceUnavailable)
		return
	}
	type result struct {
		first int64
		err   error
	}
	ch := make(chan result, 1)
	pids.AllocateBlock(time.Now().UnixMilli(), func(first int64, err error) { ch <- result{first, err} })
	ctx, cancel := context.WithTimeout(r.Context(), producerIDsTimeout)
	defer cancel()
	select {
	case res := <-ch:
		if res.err != nil {
			http.Error(w, res.err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, strconv.FormatInt(res.first, 10))
	case <-ctx.Done():
		http.Error(w, "timed out allocating producer ids", http.StatusServiceUnavailable)
	}
}

// forwardProducerIDs asks the offsets stream's leader for a block
// (kafka.Config.ForwardProducerIDs).
func (s *Server) forwardProducerIDs(leader int32, done func(first int64, err error)) {
	go func() {
		first, err := s.askProducerIDs(uint64(leader))
		done(first, err)
	}()
}

func (s *Server) askProducerIDs(leader uint64) (int64, error) {
	if _, ok := s.dir.Peer(leader); !ok {
		return -1, fmt.Errorf("node %d is not a peer", leader)
	}
	ctx, cancel := context.WithTimeout(s.ctx, producerIDsTimeout+time.Second)
	defer cancel()
	u := s.peerURL(leader, "/internal/producer-ids")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return -1, err
	}
	resp, err := s.peerClient.Do(req)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return -1, err
	}
	if resp.StatusCode != http.StatusOK {
		return -1, fmt.Errorf("POST %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	first, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil || first < 0 {
		return -1, errors.Join(fmt.Errorf("POST %s: bad answer %q", u, body), err)
	}
	return first, nil
}
