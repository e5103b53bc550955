package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/storage"
)

// Copying a snapshot's entries between servers: a follower that installs a
// Raft snapshot copies the entries the snapshot stands for from a peer
// (the leader first) with GET /internal/raft/{group}/entries?from=&to=,
// on the peer's raft listener (mutual TLS; the transport hands HTTP
// connections to peerMux).
// The answer is a run of [u32 length][protobuf raftpb.Entry], read
// sequentially from the peer's log, at most maxEntriesBytes per request,
// never past the peer's commit index (storage.Log.CommittedEntries), with
// the term of the entry before them in the Vdl-Prev-Term header. 410 Gone:
// retention deleted them; 409 Conflict: they are not committed there yet.

const maxEntriesBytes = 8 << 20

// peerMux is the HTTP the raft listener serves to peers: only peers reach
// it (their certificates are checked by the transport).
func (s *Server) peerMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/raft/{group}/entries", s.handleEntries)
	mux.HandleFunc("POST /internal/raft/{group}/config", s.handleConfig)
	mux.HandleFunc("GET /internal/raft/{group}/config", s.handleLeaderConfig)
	mux.HandleFunc("POST /internal/producer-ids", s.handleProducerIDs)
	return mux
}

// peerHTTP is the client of the peers' HTTP: each request goes to the
// node its URL's host names ("node-<id>"), over the transport's mutual
// TLS connection to it.
func (s *Server) peerHTTP() *http.Client {
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		id, err := strconv.ParseUint(strings.TrimPrefix(host, "node-"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("peer HTTP: bad host %q", host)
		}
		return s.transport.DialHTTP(id)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: dial, DialTLSContext: dial, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
}

// peerURL is the URL of path on peer's raft listener.
func (s *Server) peerURL(peer uint64, path string) string {
	scheme := "http"
	if s.sec.secure() {
		scheme = "https"
	}
	return fmt.Sprintf("%s://node-%d%s", scheme, peer, path)
}

func (s *Server) handleEntries(w http.ResponseWriter, r *http.Request) {
	group, err1 := strconv.ParseUint(r.PathValue("group"), 10, 64)
	from, err2 := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
	to, err3 := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || from == 0 || to < from {
		http.Error(w, "want /internal/raft/{group}/entries?from=N&to=M with 0 < N <= M", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	st, ok := s.byGroup[group]
	s.mu.Unlock()
	if !ok {
		http.Error(w, fmt.Sprintf("group %d is not hosted here", group), http.StatusNotFound)
		return
	}
	ents, prev, err := st.log.CommittedEntries(from, to, maxEntriesBytes)
	switch {
	case errors.Is(err, storage.ErrOutOfRange):
		http.Error(w, err.Error(), http.StatusGone)
		return
	case errors.Is(err, storage.ErrNotCommitted):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(prevTermHeader, strconv.FormatUint(prev, 10))
	bw := bufio.NewWriterSize(w, 256<<10)
	var buf []byte
	for _, e := range ents {
		buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], e)
		if err != nil {
			return
		}
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(buf)))
		if _, err := bw.Write(n[:]); err != nil {
			return
		}
		if _, err := bw.Write(buf); err != nil {
			return
		}
	}
	_ = bw.Flush()
}

const prevTermHeader = "Vdl-Prev-Term"

// fetchEntries copies committed entries [from, to] of a group from a peer
// (raftnode.EntryFetcher).
func (s *Server) fetchEntries(group, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
	if _, ok := s.dir.Peer(peer); !ok {
		return nil, 0, fmt.Errorf("node %d is not a peer", peer)
	}
	u := s.peerURL(peer, fmt.Sprintf("/internal/raft/%d/entries?from=%d&to=%d", group, from, to))
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.peerClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		err := fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
		if resp.StatusCode == http.StatusGone {
			err = fmt.Errorf("%w: %v", storage.ErrOutOfRange, err)
		}
		return nil, 0, err
	}
	prev, err := strconv.ParseUint(resp.Header.Get(prevTermHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: no %s header", u, prevTermHeader)
	}
	br := bufio.NewReaderSize(resp.Body, 256<<10)
	var out []*raftpb.Entry
	for {
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err == io.EOF {
			return out, prev, nil
		} else if err != nil {
			return out, prev, err
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxEntriesBytes+1<<20 {
			return out, prev, fmt.Errorf("entry of %d bytes from peer %d is too large", size, peer)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(br, b); err != nil {
			return out, prev, err
		}
		e := &raftpb.Entry{}
		err := proto.Unmarshal(b, e)
		if err == nil {
			err = storage.CheckEntry(e) // never hand the log an entry that would stop it
		}
		if err != nil {
			return out, prev, fmt.Errorf("bad entry from peer %d: %w", peer, err)
		}
		out = append(out, e)
	}
}
