package configserver

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/vdl-project/vdl/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

// A config server's data dir knows whose it is, as a server's does
// (server/identity.go): identity.json records the cluster, the config
// server and a random data dir id, drawn when the dir is initialised, and
// whether the dir has its place in the config servers' Raft group yet
// (founded or joined). peers.json records the data dir id each other
// config server presented when it first connected; one that comes back
// with another (a lost or replaced data dir) is refused on the raft port:
// it has forgotten its votes and its log, so neither may be counted.
//
// An empty data dir founds the group only with initial_cluster_state =
// "new" (the default for config servers, which are created together), and
// only once every other config server accepted its data dir: a config
// server whose dir was lost restarts, is refused by the others (they know
// its old dir), and never bootstraps a second group. With "existing" it
// joins: its log starts empty and waits to be added to the group.

const (
	identityFile = "identity.json"
	peersFile    = "peers.json"
	removedFile  = "removed.json" // config servers this one saw removed from the group
)

// ErrIdentity: the data dir belongs to another cluster or config server,
// or a peer presents another data dir than the one it is known by.
var ErrIdentity = errors.New("config server data dir identity")

// Identity is what a config server's identity.json holds.
type Identity struct {
	ClusterID string `json:"cluster_id"`
	ID        uint64 `json:"id"`
	DirID     uint64 `json:"dir_id"` // never 0
	// Member: the dir has its place in the group (it founded it, joined
	// it empty, or predates identities). False while founding waits for
	// the other config servers.
	Member bool `json:"member"`
	// Joined: the dir joined a running group empty (it was not among
	// its founders): its state may be copied from another config server
	// (statecopy.go).
	Joined bool `json:"joined,omitempty"`
}

// startMode is what the data dir is for at this start.
type startMode int

const (
	initialised startMode = iota // it has its place in the group
	founding                     // a new dir founding the group (waits for every peer)
	joining                      // a new dir joining a running group (empty, to be added)
)

func (m startMode) String() string {
	return [...]string{"initialised", "founding the config servers' group", "joining the config servers' group"}[m]
}

// initIdentity reads the data dir's identity, or initialises the dir.
func (s *Service) initIdentity() (startMode, error) {
	dir := s.cfg.DataDir
	var id Identity
	ok, err := readJSON(filepath.Join(dir, identityFile), &id)
	if err != nil {
		return 0, err
	}
	if ok {
		if id.ClusterID != s.cfg.ClusterID || id.ID != s.cfg.ID || id.DirID == 0 {
			return 0, fmt.Errorf("%w: data dir %s belongs to config server %d of cluster %q, but this is config server %d of cluster %q "+
				"(wrong data_dir, id or cluster_id?)", ErrIdentity, dir, id.ID, id.ClusterID, s.cfg.ID, s.cfg.ClusterID)
		}
		s.ident = id
		if !id.Member {
			return founding, nil // founding did not finish: it goes on
		}
		return initialised, nil
	}
	// A data dir from before identities holds a log: adopt it.
	legacy := false
	if names, err := os.ReadDir(filepath.Join(dir, "log")); err == nil && len(names) > 0 {
		legacy = true
	}
	s.ident = Identity{ClusterID: s.cfg.ClusterID, ID: s.cfg.ID, DirID: newDirID(), Member: true, Joined: true}
	mode := joining
	switch {
	case legacy:
		mode = initialised
		s.ident.Joined = false
	case s.cfg.InitialClusterState == "new":
		mode = founding
		s.ident.Member, s.ident.Joined = false, false
	}
	if err := saveJSON(dir, identityFile, s.ident); err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	s.log.Info("data dir initialised", "dir", dir, "dir_id", fmt.Sprintf("%016x", s.ident.DirID), "mode", mode.String())
	return mode, nil
}

func newDirID() uint64 {
	for {
		var b [8]byte
		if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
			panic(err)
		}
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// peerDirs is peers.json: the data dir id each other config server
// presented when it first connected.
type peerDirs struct {
	dir string
	mu  sync.Mutex
	ids map[uint64]uint64
	// removed are the config servers this one applied a membership
	// without (removed.json): their data dir was forgotten, and a new
	// one they present joins the group, never founds it.
	removed map[uint64]bool
	// refused is the data dir each config server was last refused with.
	refused map[uint64]uint64
}

func loadPeerDirs(dir string) (*peerDirs, error) {
	raw := map[string]uint64{}
	if _, err := readJSON(filepath.Join(dir, peersFile), &raw); err != nil {
		return nil, err
	}
	p := &peerDirs{dir: dir, ids: map[uint64]uint64{}, removed: map[uint64]bool{}, refused: map[uint64]uint64{}}
	var removed []uint64
	if _, err := readJSON(filepath.Join(dir, removedFile), &removed); err != nil {
		return nil, err
	}
	for _, id := range removed {
		p.removed[id] = true
	}
	for k, v := range raw {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil || id == 0 || v == 0 {
			return nil, fmt.Errorf("%s: bad entry %q: %d", filepath.Join(dir, peersFile), k, v)
		}
		p.ids[id] = v
	}
	return p, nil
}

// check is the transport's handshake check: a config server's first data
// dir is recorded (durably, before it is accepted); another one later is
// refused.
func (p *peerDirs) check(node, dirID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	known, ok := p.ids[node]
	switch {
	case dirID == 0:
		return nil // a config server from before data dir identities (a rolling upgrade): nothing to check
	case ok && known == dirID:
		delete(p.refused, node)
		return nil
	case ok:
		p.refused[node] = dirID
		return fmt.Errorf("%w: config server %d presents data dir %016x, but this config server knows it with data dir %016x: "+
			"it lost its data dir and must be replaced: vdlctl configserver remove %d, then add %d (docs/operations.md, replacing a config server)", ErrIdentity, node, dirID, known, node, node)
	}
	p.ids[node] = dirID
	if err := p.saveLocked(); err != nil {
		delete(p.ids, node)
		return fmt.Errorf("recording config server %d's data dir: %w", node, err)
	}
	return nil
}

func (p *peerDirs) known(node uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.ids[node]
	return ok
}

func (p *peerDirs) saveLocked() error {
	raw := map[string]uint64{}
	for _, k := range slices.Sorted(func(yield func(uint64) bool) {
		for k := range p.ids {
			if !yield(k) {
				return
			}
		}
	}) {
		raw[strconv.FormatUint(k, 10)] = p.ids[k]
	}
	return saveJSON(p.dir, peersFile, raw)
}

// foundWhenPeersAccept bootstraps the group's log with every config server
// as a voter, and starts it, once every other config server accepted this
// data dir and this one accepted theirs (each connection's handshake went
// through both ways): a config server whose data dir was lost is refused
// by the others and never founds a second group.
func (s *Service) foundWhenPeersAccept() {
	defer s.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	warned := time.Now()
	for {
		var missing []uint64
		stats := s.tr.Stats()
		for _, p := range s.cfg.Peers {
			if p.ID != s.cfg.ID && (!stats[p.ID].Connected || !s.peers.known(p.ID)) {
				missing = append(missing, p.ID)
			}
		}
		if len(missing) == 0 {
			join, why, err := s.askFounding()
			switch {
			case err != nil:
				missing = append(missing, 0)
				s.log.Debug("founding: asking the other config servers", "err", err)
			case join:
				if err := s.join(why); err != nil {
					s.log.Error("cannot join the config servers' group", "err", err)
				}
				return
			default:
				if err := s.found(); err != nil {
					s.log.Error("cannot found the config servers' group", "err", err)
				}
				return
			}
		}
		if time.Since(warned) > 10*time.Second {
			warned = time.Now()
			s.log.Warn("founding the config servers' group waits for every config server to accept this data dir "+
				"(all must be up; one that knew this config server with another data dir refuses it: then it lost its data dir "+
				"and must be replaced, docs/operations.md)", "missing", missing)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// found bootstraps the log, records that the dir is a member, and starts
// the group.
func (s *Service) found() error {
	var voters []uint64
	for _, p := range s.cfg.Peers {
		voters = append(voters, p.ID)
	}
	slices.Sort(voters)
	if last, _ := s.slog.LastIndex(); last == 0 {
		if err := s.slog.Bootstrap(&raftpb.ConfState{Voters: voters}); err != nil {
			return fmt.Errorf("config log: bootstrap: %w", err)
		}
	}
	s.ident.Member = true
	if err := saveJSON(s.cfg.DataDir, identityFile, s.ident); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	s.log.Info("config log bootstrapped: founded the config servers' group", "voters", voters)
	return s.host.AddGroup(group, s.slog)
}

// readJSON decodes a JSON file; ok is false if it does not exist.
func readJSON(name string, v any) (bool, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	return true, nil
}

// saveJSON replaces dir/name with v, durably: a temporary file, fsync,
// rename, directory fsync.
func saveJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return vfs.ReplaceFile(vfs.OS{}, dir, name, append(b, '\n'))
}
