package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Copying a snapshot's entries between servers: a follower that installs a
// Raft snapshot copies the entries the snapshot stands for from a peer
// (the leader first) with GET /internal/raft/{group}/entries?from=&to=.
// The answer is a run of [u32 length][protobuf raftpb.Entry], read
// sequentially from the peer's log, at most maxEntriesBytes per request.

const maxEntriesBytes = 8 << 20

var entriesClient = &http.Client{Timeout: 30 * time.Second}

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
	ents, err := st.log.Entries(from, to+1, maxEntriesBytes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusGone)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
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

// fetchEntries copies entries [from, to] of a group from a peer.
func (s *Server) fetchEntries(group, peer, from, to uint64) ([]*raftpb.Entry, error) {
	p, ok := s.cfg.Peer(peer)
	if !ok || p.Admin == "" {
		return nil, fmt.Errorf("peer %d has no admin address to copy entries from", peer)
	}
	u := fmt.Sprintf("http://%s/internal/raft/%d/entries?from=%d&to=%d", p.Admin, group, from, to)
	resp, err := entriesClient.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
	}
	br := bufio.NewReaderSize(resp.Body, 256<<10)
	var out []*raftpb.Entry
	for {
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxEntriesBytes+1<<20 {
			return out, fmt.Errorf("entry of %d bytes from peer %d is too large", size, peer)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(br, b); err != nil {
			return out, err
		}
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(b, e); err != nil {
			return out, fmt.Errorf("bad entry from peer %d: %w", peer, err)
		}
		out = append(out, e)
	}
}
