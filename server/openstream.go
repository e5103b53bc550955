package server

// Opening streams' logs: at start, and when the config servers assign
// new ones (hostAssigned).

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/storage"
)

// openedStream is a stream opened at start, and whether it waits for its
// founders (openStream).
type openedStream struct {
	st       *stream
	founding bool
}

// openAll opens the streams of this server among streams, concurrentOpens
// at once (each is a few reads, a truncation and an fsync: one at a time,
// a server with 10,000 streams took minutes to start), and parks each
// active segment in the file cache at once (holding a descriptor per
// stream until the first parking round, a restart at that scale ran out
// of them). They come back in streams' order; on an error, the first.
func (s *Server) openAll(streams []StreamConfig, mode startMode) ([]openedStream, error) {
	var mine []StreamConfig
	for _, sc := range streams {
		if containsID(sc.Replicas, s.cfg.NodeID) {
			mine = append(mine, sc)
		}
	}
	out := make([]openedStream, len(mine))
	errs := make([]error, len(mine))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(concurrentOpens, len(mine)) {
		wg.Go(func() {
			for i := range work {
				st, founding, err := s.openStream(mine[i], mode)
				if err == nil {
					st.log.Park()
				}
				out[i], errs[i] = openedStream{st, founding}, err
			}
		})
	}
	for i := range mine {
		work <- i
	}
	close(work)
	wg.Wait()
	s.mu.Lock()
	slices.Sort(s.ident.Streams) // opened in any order: saved in one
	s.mu.Unlock()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// openStream opens a configured stream's log. A stream the data dir never
// hosted is bootstrapped with its replica set when this server founds the
// cluster, or when the stream is new to an initialised server; it starts
// empty, learning its membership from the leader, when the server (or just
// the stream, join = true) is joining. A stream the data dir hosted whose
// directory is gone lost its data: the server refuses to start. founding
// says the group may only start once every founding replica is known (see
// hostWhenFoundersKnown).
func (s *Server) openStream(sc StreamConfig, mode startMode) (*stream, bool, error) {
	dir := path.Join(s.cfg.DataDir, "streams", fmt.Sprintf("%d", sc.ID))
	files, err := s.fs.List(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Out of descriptors, an IO error: not proof that the data is
		// gone (it once made a server out of descriptors say it lost
		// its data and must be replaced).
		return nil, false, fmt.Errorf("stream %s: listing its log %s: %w", sc.Name, dir, err)
	}
	s.mu.Lock() // streams are opened several at once (hostAssigned)
	known := slices.Contains(s.ident.Streams, sc.ID)
	s.mu.Unlock()
	if known && len(files) == 0 {
		return nil, false, fmt.Errorf("%w: stream %s: its log %s is gone although this data dir hosted it: "+
			"this server lost its data and must be replaced (docs/operations.md, replacing a server)", ErrIdentity, sc.Name, dir)
	}
	l, err := storage.Open(storage.Options{
		FS:            s.fs,
		Dir:           dir,
		Stream:        sc.ID,
		SegmentSize:   s.cfg.Storage.SegmentBytes,
		TailBudget:    s.tailBudget,
		ReadBudget:    s.readBudget,
		ReadAhead:     true,
		KeepPageCache: s.cfg.Storage.KeepPageCache,
		Space:         s.space,
		Files:         s.files,
		Logger:        s.log,
		Name:          sc.Name,
	})
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	s.checkPromised(sc.ID, l)
	st := &stream{cfg: sc, log: l, traffic: new(streamTraffic)}
	s.mu.Lock()
	s.opened = append(s.opened, st)
	if !known {
		s.ident.Streams = append(s.ident.Streams, sc.ID)
	}
	s.mu.Unlock()
	if !known {
		if mode != joining && !sc.Join {
			voters := sc.bootstrapVoters()
			if err := l.Bootstrap(&raftpb.ConfState{Voters: voters}); err != nil {
				return nil, false, fmt.Errorf("stream %s: bootstrap: %w", sc.Name, err)
			}
			s.log.Info("stream bootstrapped", "stream", sc.Name, "group", sc.ID, "voters", voters)
		} else {
			s.log.Info("stream joining: it waits to be added to the group's membership", "stream", sc.Name, "group", sc.ID)
		}
	}
	// A log still at its bootstrap has never replicated: it may only vote
	// once every founding replica's data dir is known (see peerDirs).
	last, _ := l.LastIndex()
	_, cs, _ := l.InitialState()
	return st, last <= 1 && len(cs.GetVoters()) > 0, nil
}
