package configserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/storage"
)

// A config server that joins the group (a replacement for one whose data
// dir was lost) starts with an empty log and an empty state. The leader
// sends it a Raft snapshot, which stands for the leader's log from its
// first index (storage.Log.Snapshot): the joining config server copies
// those entries from the others over their raft listener (the peers' HTTP
// of the transport, mutual TLS with config server certificates:
// GET /internal/raft/1/entries), as a server does for a stream. Entries
// below the log's start were compacted away: the state they built is
// copied instead (GET /internal/state, a consistent bbolt copy), once,
// when the state is found behind the log's start. A state copied from any
// config server is a prefix of the one committed history, so it is as
// good as one built here; what matters is only that it reaches the log's
// start, so that the commands after it are in the log.

const (
	maxEntriesBytes = 4 << 20
	prevTermHeader  = "Vdl-Prev-Term"
	appliedHeader   = "Vdl-Applied"
)

// peerMux is what the raft listener serves to the other config servers.
func (s *Service) peerMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/raft/1/entries", s.handleEntries)
	mux.HandleFunc("GET /internal/state", s.handleState)
	mux.HandleFunc("GET /internal/founding", s.handleFounding)
	return mux
}

// peerHTTP is a client of the other config servers' raft listeners: a
// URL's host names the config server ("config-<id>").
func (s *Service) newPeerHTTP() *http.Client {
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		id, err := strconv.ParseUint(strings.TrimPrefix(host, "config-"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("peer HTTP: bad host %q", host)
		}
		return s.tr.DialHTTP(id)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: dial, DialTLSContext: dial, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
}

func (s *Service) peerURL(peer uint64, path string) string {
	scheme := "http"
	if s.pool != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://config-%d%s", scheme, peer, path)
}

func (s *Service) handleEntries(w http.ResponseWriter, r *http.Request) {
	from, err1 := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
	to, err2 := strconv.ParseUint(r.URL.Query().Get("to"), 10, 64)
	if err := errors.Join(err1, err2); err != nil || from == 0 || to < from {
		http.Error(w, "want /internal/raft/1/entries?from=N&to=M with 0 < N <= M", http.StatusBadRequest)
		return
	}
	ents, prev, err := s.slog.CommittedEntries(from, to, maxEntriesBytes)
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
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, e := range ents {
		b, err := proto.Marshal(e)
		if err != nil {
			return
		}
		if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b)))); err != nil {
			return
		}
		if _, err := bw.Write(b); err != nil {
			return
		}
	}
	_ = bw.Flush()
}

// fetchEntries copies committed entries [from, to] of the group from a
// peer (raftnode.EntryFetcher).
func (s *Service) fetchEntries(_, peer, from, to uint64) ([]*raftpb.Entry, uint64, error) {
	u := s.peerURL(peer, fmt.Sprintf("/internal/raft/1/entries?from=%d&to=%d", from, to))
	resp, err := s.peerGet(u)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		err := fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
		switch resp.StatusCode {
		case http.StatusGone:
			err = fmt.Errorf("%w: %v", storage.ErrOutOfRange, err)
		case http.StatusConflict:
			err = fmt.Errorf("%w: %v", storage.ErrNotCommitted, err)
		}
		return nil, 0, err
	}
	prev, err := strconv.ParseUint(resp.Header.Get(prevTermHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: no %s header", u, prevTermHeader)
	}
	br := bufio.NewReader(resp.Body)
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
			return out, prev, fmt.Errorf("entry of %d bytes from config server %d is too large", size, peer)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(br, b); err != nil {
			return out, prev, err
		}
		e := &raftpb.Entry{}
		err := proto.Unmarshal(b, e)
		if err == nil {
			err = storage.CheckEntry(e)
		}
		if err != nil {
			return out, prev, fmt.Errorf("bad entry from config server %d: %w", peer, err)
		}
		out = append(out, e)
	}
}

func (s *Service) peerGet(u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return s.peerHTTP.Do(req)
}

// handleState answers a consistent copy of the state database.
func (s *Service) handleState(w http.ResponseWriter, _ *http.Request) {
	err := s.state.db.View(func(tx *bolt.Tx) error {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(appliedHeader, strconv.FormatInt(getInt(tx.Bucket(bMeta), kApplied), 10))
		w.Header().Set("Content-Length", strconv.FormatInt(tx.Size(), 10))
		_, err := tx.WriteTo(w)
		return err
	})
	if err != nil {
		s.log.Warn("serving the state to a config server", "err", err)
	}
}

// stateBehindLog: the state cannot be built from the log (a joining
// config server's state, empty, and a log installed from a snapshot).
func (s *Service) stateBehindLog() bool {
	return s.state.Applied() < s.slog.StartOffset()
}

// copyState replaces the state with another config server's that reaches
// the log's start, trying the leader first.
func (s *Service) copyState() error {
	need := s.slog.StartOffset()
	var errs []error
	order := []uint64{s.Leader()}
	for _, p := range s.cfg.Peers {
		if p.ID != s.cfg.ID && p.ID != order[0] {
			order = append(order, p.ID)
		}
	}
	for _, peer := range order {
		if peer == 0 || peer == s.cfg.ID {
			continue
		}
		applied, err := s.copyStateFrom(peer, need)
		if err == nil {
			s.log.Info("state copied from another config server: the log before it was compacted", "from", peer, "applied", applied, "log_start", need)
			return nil
		}
		errs = append(errs, fmt.Errorf("config server %d: %w", peer, err))
	}
	return fmt.Errorf("copying the state (the log starts at %d): %w", need, errors.Join(errs...))
}

func (s *Service) copyStateFrom(peer uint64, need int64) (int64, error) {
	resp, err := s.peerGet(s.peerURL(peer, "/internal/state"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /internal/state: %s", resp.Status)
	}
	if applied, err := strconv.ParseInt(resp.Header.Get(appliedHeader), 10, 64); err != nil || applied < need {
		return 0, fmt.Errorf("its state has applied below %s, not up to the log start %d", resp.Header.Get(appliedHeader), need)
	}
	tmp := filepath.Join(s.cfg.DataDir, "state.db.incoming")
	defer os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return s.state.restore(tmp, need)
}

// restore replaces every bucket of the state with the database at path's,
// in one transaction, if that one has applied at least need.
func (s *State) restore(path string, need int64) (int64, error) {
	src, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	defer func() { // the cache dropped before readers see the new offset
		s.invalidate()
		s.applied.Store(s.appliedInDB())
	}()
	var applied int64
	err = src.View(func(stx *bolt.Tx) error {
		meta := stx.Bucket(bMeta)
		if meta == nil {
			return errors.New("no meta bucket")
		}
		if applied = getInt(meta, kApplied); applied < need {
			return fmt.Errorf("it has applied below %d, not up to %d", applied, need)
		}
		return s.db.Update(func(tx *bolt.Tx) error {
			if getInt(tx.Bucket(bMeta), kApplied) >= applied {
				return errors.New("the state here is already as new")
			}
			return stx.ForEach(func(name []byte, sb *bolt.Bucket) error {
				if tx.Bucket(name) != nil {
					if err := tx.DeleteBucket(name); err != nil {
						return err
					}
				}
				b, err := tx.CreateBucket(name)
				if err != nil {
					return err
				}
				return sb.ForEach(func(k, v []byte) error {
					if v == nil {
						return fmt.Errorf("bucket %s: nested bucket %q", name, k)
					}
					return b.Put(k, v)
				})
			})
		})
	})
	return applied, err
}
