package configserver

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Errors a command can end with; the API maps them to HTTP statuses and
// the Kafka front end to error codes.
var (
	ErrInvalid   = errors.New("invalid request")
	ErrExists    = errors.New("already exists")
	ErrNotFound  = errors.New("not found")
	ErrPlacement = errors.New("cannot place")
	ErrNotLeader = errors.New("not the config servers' leader")
)

// Command is one replicated change. Everything the change depends on that
// is not in the replicated state (the placement the leader chose, its
// clock) is in the command, so applying it is deterministic.
type Command struct {
	Kind   string        `json:"kind"`
	At     int64         `json:"at_ms"`
	Server *Server       `json:"server,omitempty"` // register
	Spec   *StreamSpec   `json:"spec,omitempty"`   // create
	Change *StreamChange `json:"change,omitempty"` // alter
	Name   string        `json:"name,omitempty"`   // delete, alter, purge; set-server-state: the state
	Node   uint64        `json:"node,omitempty"`   // set-server-state: the server; purge: the group
	// Replicas is the placement of a create (the first is the preferred
	// leader), chosen by the proposing leader from its view of the servers.
	Replicas []uint64 `json:"replicas,omitempty"`
	// To is a move's destination (Node its source); Step its next step
	// (move-step) or how it ended (move-end), Reason why.
	To     uint64 `json:"to,omitempty"`
	Step   string `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Command kinds.
const (
	CmdRegister       = "register"
	CmdSetServerState = "set-server-state"
	CmdCreate         = "create"
	CmdDelete         = "delete"
	CmdAlter          = "alter"
	CmdPurge          = "purge"
)

// Outcome is what applying a command did: an error (deterministic, the
// same on every replica) or the stream it created or changed.
type Outcome struct {
	Err    string  `json:"err,omitempty"`
	Kind   string  `json:"kind,omitempty"` // the sentinel: invalid, exists, not-found, placement
	Stream *Stream `json:"stream,omitempty"`
}

// Error returns the outcome's error, wrapping its sentinel.
func (o Outcome) Error() error {
	if o.Err == "" {
		return nil
	}
	for _, s := range sentinels {
		if s.kind == o.Kind {
			return &outcomeError{msg: o.Err, sentinel: s.err}
		}
	}
	return errors.New(o.Err)
}

// outcomeError is a deterministic refusal: its message (which names the
// sentinel already) and its sentinel.
type outcomeError struct {
	msg      string
	sentinel error
}

func (e *outcomeError) Error() string { return e.msg }
func (e *outcomeError) Unwrap() error { return e.sentinel }

var sentinels = []struct {
	kind string
	err  error
}{{"invalid", ErrInvalid}, {"exists", ErrExists}, {"not-found", ErrNotFound}, {"placement", ErrPlacement}}

func outcomeOf(err error) Outcome {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return Outcome{Err: err.Error(), Kind: s.kind}
		}
	}
	return Outcome{Err: err.Error()}
}

// Buckets of the state database.
var (
	bMeta     = []byte("meta")     // applied offset, next group id, version
	bServers  = []byte("servers")  // id -> Server
	bStreams  = []byte("streams")  // name -> Stream
	bOps      = []byte("ops")      // index -> Op
	bOutcomes = []byte("outcomes") // offset -> Outcome (recent ones)

	kApplied   = []byte("applied")    // the next log offset to apply
	kNextGroup = []byte("next-group") // the next stream group id
	kVersion   = []byte("version")    // the offset of the last change of servers or streams
)

// keepOutcomes is how many commands' outcomes are kept for their proposers.
const keepOutcomes = 4096

// State is the replicated state machine on a bbolt database.
type State struct {
	db    *bolt.DB
	cache catalogCache // the servers and streams decoded (catalog.go)
	// applied is the next offset to apply as readers see it: it moves
	// only once the cache has the command's changes, so one who saw a
	// command applied (a read barrier waits for it) never then reads the
	// catalog from before it. The database's own moves at the commit,
	// before the cache is patched (3 December: a move read as done with
	// its stream still listing the old replica).
	applied atomic.Int64
}

// OpenState opens (creating) the state database.
func OpenState(path string) (*State, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, fmt.Errorf("config state %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bMeta, bServers, bStreams, bOps, bOutcomes, bMoves} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &State{db: db}
	s.applied.Store(s.appliedInDB())
	return s, nil
}

// Close closes the database.
func (s *State) Close() error { return s.db.Close() }

// Applied is the log offset of the next command to apply.
func (s *State) Applied() int64 { return s.applied.Load() }

func (s *State) appliedInDB() (next int64) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		next = getInt(tx.Bucket(bMeta), kApplied)
		return nil
	})
	return next
}

// NextGroup is the group id the next stream will get: groups below it were
// allocated once.
func (s *State) NextGroup() (g uint64) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		g = uint64(max(getInt(tx.Bucket(bMeta), kNextGroup), firstStreamGroupID))
		return nil
	})
	return g
}

// Version is the offset of the last command that changed servers or streams.
func (s *State) Version() (v int64) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		v = getInt(tx.Bucket(bMeta), kVersion)
		return nil
	})
	return v
}

// Apply applies the command at log offset off exactly once: a command at an offset already applied is skipped, so a
// restart replays the log from Applied safely. A malformed command is an
// outcome, never a failure: the log is the truth, every replica skips it.
func (s *State) Apply(off int64, data []byte) error {
	var t *touched
	var next int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		t = track(tx)
		defer untrack(tx)
		meta := tx.Bucket(bMeta)
		if next = getInt(meta, kApplied); off < next {
			return nil
		}
		var cmd Command
		var out Outcome
		var changed bool
		if err := json.Unmarshal(data, &cmd); err != nil {
			out = outcomeOf(fmt.Errorf("%w: malformed command: %v", ErrInvalid, err))
		} else {
			out, changed = apply(tx, uint64(off), cmd)
		}
		if changed {
			putInt(meta, kVersion, off)
		}
		b, _ := json.Marshal(out)
		oc := tx.Bucket(bOutcomes)
		if err := oc.Put(key64(uint64(off)), b); err != nil {
			return err
		}
		if off >= keepOutcomes {
			if err := oc.Delete(key64(uint64(off - keepOutcomes))); err != nil {
				return err
			}
		}
		next = off + 1
		putInt(meta, kApplied, next)
		return nil
	})
	s.cache.update(t, err)
	if err == nil {
		s.applied.Store(next) // after the cache: see State.applied
	}
	return err
}

// Outcome is the outcome of the command at offset off, if still kept.
func (s *State) Outcome(off int64) (o Outcome, ok bool) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bOutcomes).Get(key64(uint64(off)))
		ok = b != nil && json.Unmarshal(b, &o) == nil
		return nil
	})
	return o, ok
}

// apply changes the state; changed says whether servers or streams did.
func apply(tx *bolt.Tx, index uint64, c Command) (Outcome, bool) {
	var (
		out    Outcome
		err    error
		detail string
	)
	switch c.Kind {
	case CmdRegister:
		detail, err = applyRegister(tx, c)
	case CmdSetServerState:
		detail, err = applyServerState(tx, c)
	case CmdCreate:
		out.Stream, err = applyCreate(tx, c)
		if err == nil {
			detail = fmt.Sprintf("stream %s: group %d on %v", out.Stream.Name, out.Stream.Group, out.Stream.Replicas)
		}
	case CmdDelete:
		out.Stream, err = applyDelete(tx, c)
		if err == nil {
			detail = fmt.Sprintf("stream %s: group %d is stopped and its data removed on %v", c.Name, out.Stream.Group, out.Stream.Replicas)
		}
	case CmdAlter:
		out.Stream, err = applyAlter(tx, c)
		if err == nil {
			detail = fmt.Sprintf("stream %s: %s", c.Name, describeChange(c.Change))
		}
	case CmdPurge:
		detail, err = applyPurge(tx, c)
	case CmdMoveStart:
		detail, err = applyMoveStart(tx, c)
	case CmdMoveStep:
		detail, err = applyMoveStep(tx, c)
	case CmdMoveCancel:
		detail, err = applyMoveCancel(tx, c)
	case CmdMoveEnd:
		detail, err = applyMoveEnd(tx, c)
	case CmdFormerReleased:
		detail, err = applyFormerReleased(tx, c)
	default:
		err = fmt.Errorf("%w: unknown command %q", ErrInvalid, c.Kind)
	}
	if err != nil {
		return outcomeOf(err), false
	}
	op := Op{Index: index, At: c.At, Kind: c.Kind, Detail: detail}
	b, _ := json.Marshal(op)
	if err := tx.Bucket(bOps).Put(key64(index), b); err != nil {
		return outcomeOf(err), false
	}
	return out, true
}

func applyRegister(tx *bolt.Tx, c Command) (string, error) {
	srv := c.Server
	if srv == nil || srv.ID == 0 {
		return "", fmt.Errorf("%w: register needs a server with a non-zero id", ErrInvalid)
	}
	old, found := getServer(tx, srv.ID)
	srv.State, srv.Registered = ServerActive, c.At
	if found {
		srv.State, srv.Registered = old.State, old.Registered
	}
	if err := putJSON(tx.Bucket(bServers), key64(srv.ID), srv); err != nil {
		return "", err
	}
	if found {
		return fmt.Sprintf("server %d: addresses or location changed (dc %q rack %q)", srv.ID, srv.DC, srv.Rack), nil
	}
	return fmt.Sprintf("server %d registered (dc %q rack %q)", srv.ID, srv.DC, srv.Rack), nil
}

func applyServerState(tx *bolt.Tx, c Command) (string, error) {
	srv, ok := getServer(tx, c.Node)
	if !ok {
		return "", fmt.Errorf("%w: server %d", ErrNotFound, c.Node)
	}
	if c.Name != ServerActive && c.Name != ServerDraining {
		return "", fmt.Errorf("%w: server state %q: want active or draining", ErrInvalid, c.Name)
	}
	srv.State = c.Name
	return fmt.Sprintf("server %d is %s", c.Node, c.Name), putJSON(tx.Bucket(bServers), key64(srv.ID), srv)
}

func applyCreate(tx *bolt.Tx, c Command) (*Stream, error) {
	if c.Spec == nil {
		return nil, fmt.Errorf("%w: create needs a spec", ErrInvalid)
	}
	spec := *c.Spec
	internal := spec.Name == OffsetsStream
	if !internal {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
	}
	streams := tx.Bucket(bStreams)
	if streams.Get([]byte(spec.Name)) != nil {
		return nil, fmt.Errorf("%w: stream %q", ErrExists, spec.Name)
	}
	if err := checkReplicas(tx, c.Replicas, spec.ReplicationFactor, internal); err != nil {
		return nil, err
	}
	meta := tx.Bucket(bMeta)
	group := OffsetsGroup
	if !internal {
		group = uint64(max(getInt(meta, kNextGroup), firstStreamGroupID))
		putInt(meta, kNextGroup, int64(group)+1)
	}
	var dirs []uint64
	for _, id := range c.Replicas {
		srv, _ := getServer(tx, id)
		dirs = append(dirs, srv.DirID)
	}
	st := &Stream{Name: spec.Name, Group: group, Replicas: slices.Clone(c.Replicas), Dirs: dirs,
		Founders: slices.Sorted(slices.Values(c.Replicas)), PreferredDC: spec.PreferredDC,
		RetentionMs: deref(spec.RetentionMs, -1), RetentionBytes: deref(spec.RetentionBytes, -1), State: StreamActive, Created: c.At}
	return st, putJSON(streams, []byte(st.Name), st)
}

// checkReplicas: the placement names distinct registered servers, as many
// as asked (the offsets stream takes what there is).
func checkReplicas(tx *bolt.Tx, replicas []uint64, rf int, internal bool) error {
	if !internal && len(replicas) != rf || len(replicas) == 0 {
		return fmt.Errorf("%w: %d replicas for replication factor %d", ErrPlacement, len(replicas), rf)
	}
	seen := map[uint64]bool{}
	for _, id := range replicas {
		if seen[id] {
			return fmt.Errorf("%w: server %d twice", ErrPlacement, id)
		}
		seen[id] = true
		if _, ok := getServer(tx, id); !ok {
			return fmt.Errorf("%w: server %d is not registered", ErrPlacement, id)
		}
	}
	return nil
}

func applyDelete(tx *bolt.Tx, c Command) (*Stream, error) {
	st, err := activeStream(tx, c.Name)
	if err != nil {
		return nil, err
	}
	if st.Name == OffsetsStream {
		return nil, fmt.Errorf("%w: %s is internal", ErrInvalid, st.Name)
	}
	// The name is free at once; the group's tombstone stays until every
	// replica stopped it (applyPurge); its move, if any, ends with it.
	st.State = StreamDeleting
	if m, ok := getMove(tx, st.Name); ok && m.State == MoveActive {
		m.State, m.Updated, m.Reason = MoveCancelled, c.At, "the stream was deleted"
		if err := putJSON(tx.Bucket(bMoves), []byte(st.Name), m); err != nil {
			return nil, err
		}
	}
	streams := tx.Bucket(bStreams)
	if err := deleteKey(streams, []byte(st.Name)); err != nil {
		return nil, err
	}
	return st, putJSON(streams, tombstoneKey(st.Name, st.Group), st)
}

func applyAlter(tx *bolt.Tx, c Command) (*Stream, error) {
	st, err := activeStream(tx, c.Name)
	if err != nil {
		return nil, err
	}
	ch := c.Change
	if ch == nil {
		return nil, fmt.Errorf("%w: alter needs a change", ErrInvalid)
	}
	if ch.PreferredDC != nil {
		st.PreferredDC = *ch.PreferredDC
	}
	if ch.RetentionMs != nil {
		st.RetentionMs = *ch.RetentionMs
	}
	if ch.RetentionBytes != nil {
		st.RetentionBytes = *ch.RetentionBytes
	}
	if err := checkRetention(st.RetentionMs, st.RetentionBytes); err != nil {
		return nil, err
	}
	return st, putJSON(tx.Bucket(bStreams), []byte(st.Name), st)
}

// applyPurge forgets a deleted stream's group once every replica stopped it.
func applyPurge(tx *bolt.Tx, c Command) (string, error) {
	streams := tx.Bucket(bStreams)
	k := tombstoneKey(c.Name, c.Node)
	if streams.Get(k) == nil {
		return "", fmt.Errorf("%w: no deleted stream %s with group %d", ErrNotFound, c.Name, c.Node)
	}
	return fmt.Sprintf("stream %s (group %d) purged: every replica stopped it", c.Name, c.Node), deleteKey(streams, k)
}

func tombstoneKey(name string, group uint64) []byte {
	return fmt.Appendf(nil, "%s\x00%d", name, group)
}

func activeStream(tx *bolt.Tx, name string) (*Stream, error) {
	var st Stream
	b := tx.Bucket(bStreams).Get([]byte(name))
	if b == nil || json.Unmarshal(b, &st) != nil || st.State != StreamActive {
		return nil, fmt.Errorf("%w: stream %q", ErrNotFound, name)
	}
	return &st, nil
}

func describeChange(ch *StreamChange) string {
	var s string
	if ch.PreferredDC != nil {
		s += fmt.Sprintf("preferred dc %q ", *ch.PreferredDC)
	}
	if ch.RetentionMs != nil {
		s += fmt.Sprintf("retention_ms %d ", *ch.RetentionMs)
	}
	if ch.RetentionBytes != nil {
		s += fmt.Sprintf("retention_bytes %d ", *ch.RetentionBytes)
	}
	return s
}

// Servers lists the registered servers by id. The slice is shared: read it,
// never change it.
func (s *State) Servers() []Server {
	servers, _ := s.catalog()
	return servers
}

// Streams lists the streams, deleted ones still stopping included, by name
// (shared like Servers').
func (s *State) Streams() []Stream {
	_, streams := s.catalog()
	return streams
}

// Stream returns an active stream.
func (s *State) Stream(name string) (st *Stream, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		st, err = activeStream(tx, name)
		return err
	})
	return st, err
}

// Ops returns the newest n operations, oldest first.
func (s *State) Ops(n int) (out []Op) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bOps).Cursor()
		for k, v := c.Last(); k != nil && len(out) < n; k, v = c.Prev() {
			var op Op
			if json.Unmarshal(v, &op) == nil {
				out = append(out, op)
			}
		}
		return nil
	})
	slices.Reverse(out)
	return out
}

func getServer(tx *bolt.Tx, id uint64) (Server, bool) {
	var srv Server
	b := tx.Bucket(bServers).Get(key64(id))
	return srv, b != nil && json.Unmarshal(b, &srv) == nil
}

func putJSON(b *bolt.Bucket, k []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := b.Put(k, data); err != nil {
		return err
	}
	touch(b, k, data)
	return nil
}

// deleteKey deletes a record (and tells the catalog cache).
func deleteKey(b *bolt.Bucket, k []byte) error {
	if err := b.Delete(k); err != nil {
		return err
	}
	touch(b, k, nil)
	return nil
}

func key64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func getInt(b *bolt.Bucket, k []byte) int64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func putInt(b *bolt.Bucket, k []byte, v int64) { _ = b.Put(k, key64(uint64(v))) }

func deref(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
