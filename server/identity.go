package server

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

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

// peerBook is the server's Roster, kept durably in peers.json: whatever
// changes the known data dirs is written (fsync) before it is acted on.
type peerBook struct {
	fs  vfs.FS
	dir string
	log *slog.Logger

	mu sync.Mutex
	r  *Roster
}

func loadPeerBook(fsys vfs.FS, dir string, logger *slog.Logger) (*peerBook, error) {
	name := path.Join(dir, peersFile)
	var f peersJSON
	if _, err := readFile(fsys, name, &f); err != nil {
		// The first format: the dirs alone, every one taken as confirmed.
		if _, errOld := readFile(fsys, name, &f.Dirs); errOld != nil {
			return nil, err
		}
	}
	dirs := map[uint64]uint64{}
	for k, v := range f.Dirs {
		var id uint64
		if _, err := fmt.Sscan(k, &id); err != nil || id == 0 {
			return nil, fmt.Errorf("%s: bad node id %q", name, k)
		}
		dirs[id] = v
	}
	return &peerBook{fs: fsys, dir: dir, log: logger, r: NewRoster(dirs, f.FirstContact)}, nil
}

// peersJSON is peers.json: the known data dir of each peer (node id ->
// dir id) and the peers whose dir is known only from their handshake
// (Roster.FirstContact).
type peersJSON struct {
	Dirs         map[string]uint64 `json:"dirs"`
	FirstContact []uint64          `json:"first_contact,omitempty"`
}

// check is the transport's handshake check (Roster.Admit, recorded first).
// A peer presenting another data dir is connected to, and heard only as a
// leader or candidate (hears).
func (p *peerBook) check(node, dirID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	record, err := p.r.Admit(node, dirID)
	if errors.Is(err, errDirChanged) {
		p.log.Warn("peer lost its data dir: its votes and acknowledgements are not counted until it is replaced", "err", err)
		return nil
	}
	if err != nil || !record {
		return err
	}
	if err := p.saveLocked(); err != nil {
		return fmt.Errorf("recording node %d's data dir: %w", node, err)
	}
	return nil
}

func (p *peerBook) known(node uint64) bool {
	_, ok := p.get(node)
	return ok
}

func (p *peerBook) get(node uint64) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Dir(node)
}

func (p *peerBook) hosted(group uint64, cs *raftpb.ConfState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.r.Hosted(group, cs)
}

// hears reports whether a message from node is heard (Roster.Hears).
func (p *peerBook) hears(node uint64, t raftpb.MessageType) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Hears(node, t)
}

// tells reports whether a message of group is sent to node (Roster.Tells),
// and the data dir it is meant for (Roster.Addressee).
func (p *peerBook) tells(node, group uint64, t raftpb.MessageType) (bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Tells(node, group, t), p.r.Addressee(node)
}

// memberDirs is Roster.MemberDirs.
func (p *peerBook) memberDirs(group, self, dir uint64) map[uint64]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.MemberDirs(group, self, dir)
}

// candidate is Roster.Candidate.
func (p *peerBook) candidate(node uint64, connected bool, conn uint64) (Candidate, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Candidate(node, connected, conn)
}

func (p *peerBook) members(group uint64) (voters, learners []uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.Members(group)
}

// applied records a membership change (Roster.Applied) and persists what
// it changed.
func (p *peerBook) applied(self, group uint64, cs *raftpb.ConfState, context []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.r.Applied(self, group, cs, context) {
		return nil
	}
	return p.saveLocked()
}

func (p *peerBook) saveLocked() error {
	f := peersJSON{Dirs: map[string]uint64{}, FirstContact: p.r.FirstContact()}
	for k, v := range p.r.Dirs() {
		f.Dirs[fmt.Sprint(k)] = v
	}
	return writeFile(p.fs, p.dir, peersFile, f)
}

// readFile decodes a JSON file; ok is false if it does not exist.
func readFile(fsys vfs.FS, name string, v any) (bool, error) {
	size, err := fsys.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if size > 64<<20 { // a bound against a corrupt file; an assignment of 10,000 streams is a few MiB
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
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	return true, nil
}

// writeFile replaces dir/name with v as JSON, durably (a temporary file, fsync, rename,
// directory fsync): a crash leaves the old file or the new one.
func writeFile(fsys vfs.FS, dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return vfs.ReplaceFile(fsys, dir, name, append(b, '\n'))
}
