package server

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/vdl-project/vdl/vfs"
)

// A data dir knows whose it is. identity.json records, when the dir is
// initialised, the cluster and node it belongs to and a random data dir id;
// a server refuses to start on another cluster's or node's dir. The dir id
// changes whenever a server starts over on an empty dir (a replaced disk),
// and peers.json records the dir id each peer presented when it first
// connected: a peer that comes back with another one has lost its votes and
// its log, and is refused until an operator replaces it through membership
// changes (docs/operations.md), instead of voting with a log it no longer
// has.

const (
	identityFile = "identity.json"
	peersFile    = "peers.json"
)

// Identity is what identity.json holds.
type Identity struct {
	ClusterID string `json:"cluster_id"`
	NodeID    uint64 `json:"node_id"`
	// DirID is drawn when the dir is initialised; it is never 0.
	DirID uint64 `json:"dir_id"`
	// Streams lists the groups this dir has hosted: a configured stream
	// missing from it is new (bootstrapped or joined); one in it whose log
	// is gone was lost, and the server refuses to start.
	Streams []uint64 `json:"streams"`
}

// ErrIdentity: the data dir belongs to another cluster or node, or lost a
// stream's data.
var ErrIdentity = errors.New("data dir identity")

// loadIdentity reads identity.json; ok is false if there is none.
func loadIdentity(fsys vfs.FS, dir string) (Identity, bool, error) {
	var id Identity
	ok, err := readFile(fsys, path.Join(dir, identityFile), &id)
	if err == nil && ok && (id.NodeID == 0 || id.DirID == 0) {
		err = fmt.Errorf("%w: %s: node_id and dir_id must be set", ErrIdentity, path.Join(dir, identityFile))
	}
	return id, ok, err
}

// check refuses a dir initialised for another cluster or node.
func (id Identity) check(clusterID string, nodeID uint64, dir string) error {
	if id.ClusterID != clusterID || id.NodeID != nodeID {
		return fmt.Errorf("%w: data dir %s belongs to node %d of cluster %q, but this server is node %d of cluster %q "+
			"(wrong data_dir, node_id or cluster_id?)", ErrIdentity, dir, id.NodeID, id.ClusterID, nodeID, clusterID)
	}
	return nil
}

// newDirID draws a data dir id.
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

func saveIdentity(fsys vfs.FS, dir string, id Identity) error {
	slices.Sort(id.Streams)
	return writeFile(fsys, dir, identityFile, id)
}

// peerDirs is the dir id each peer presented when it first connected,
// kept in peers.json.
type peerDirs struct {
	fs  vfs.FS
	dir string

	mu   sync.Mutex
	dirs map[uint64]uint64
}

func loadPeerDirs(fsys vfs.FS, dir string) (*peerDirs, error) {
	p := &peerDirs{fs: fsys, dir: dir}
	var raw map[string]uint64
	if _, err := readFile(fsys, path.Join(dir, peersFile), &raw); err != nil {
		return nil, err
	}
	p.dirs = map[uint64]uint64{}
	for k, v := range raw {
		var id uint64
		if _, err := fmt.Sscan(k, &id); err != nil || id == 0 {
			return nil, fmt.Errorf("%s: bad node id %q", path.Join(dir, peersFile), k)
		}
		p.dirs[id] = v
	}
	return p, nil
}

// errDirChanged: a peer presents another data dir than the one known.
var errDirChanged = errors.New("data dir changed")

// check accepts peer node with data dir dirID: the one known, or, for a
// peer not known yet, the first one it presents (recorded durably first).
func (p *peerDirs) check(node, dirID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	known, ok := p.dirs[node]
	switch {
	case ok && known == dirID:
		return nil
	case ok:
		return fmt.Errorf("%w: node %d presents data dir %016x but this server knows it with data dir %016x: "+
			"it lost its log and votes, and must be replaced through membership changes (vdlctl member replace %d)",
			errDirChanged, node, dirID, known, node)
	}
	p.dirs[node] = dirID
	if err := p.saveLocked(); err != nil {
		delete(p.dirs, node)
		return fmt.Errorf("recording node %d's data dir: %w", node, err)
	}
	return nil
}

// known reports whether node's data dir is known.
func (p *peerDirs) known(node uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.dirs[node]
	return ok
}

// forget drops node's data dir (it left every group here): a new one is
// accepted when it is added again.
func (p *peerDirs) forget(node uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.dirs[node]; !ok {
		return nil
	}
	delete(p.dirs, node)
	return p.saveLocked()
}

func (p *peerDirs) saveLocked() error {
	raw := map[string]uint64{}
	for k, v := range p.dirs {
		raw[fmt.Sprint(k)] = v
	}
	return writeFile(p.fs, p.dir, peersFile, raw)
}

// readJSON decodes a file; ok is false if it does not exist.
func readFile(fsys vfs.FS, name string, v any) (bool, error) {
	size, err := fsys.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if size > 1<<20 {
		return false, fmt.Errorf("%s: %d bytes is too large", name, size)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	return true, nil
}

// writeJSON replaces dir/name durably (a temporary file, fsync, rename,
// directory fsync): a crash leaves the old file or the new one.
func writeFile(fsys vfs.FS, dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path.Join(dir, name+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// set records node's data dir (a membership change named it).
func (p *peerDirs) set(node, dirID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirs[node] == dirID {
		return nil
	}
	old, had := p.dirs[node]
	p.dirs[node] = dirID
	if err := p.saveLocked(); err != nil {
		if had {
			p.dirs[node] = old
		} else {
			delete(p.dirs, node)
		}
		return err
	}
	return nil
}

// get returns node's data dir, if known.
func (p *peerDirs) get(node uint64) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.dirs[node]
	return d, ok
}
