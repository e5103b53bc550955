package storage

// The side meta file: small, rarely written, replaced atomically
// (write temp, Sync, Rename, SyncDir). It holds what must outlive the
// segments it was learned from: the stream id, the conf state history,
// the retention point and the stream's replicated config.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/vfs"
)

const (
	metaName    = "meta"
	metaTmpName = "meta.tmp"
	metaMagic   = "VDLMETA1"
	metaFixed   = 84
	maxMetaSize = 64 << 20
)

// confEntry is the ConfState in force from Raft index `index` on.
type confEntry struct {
	index uint64
	cs    *pb.ConfState
}

type meta struct {
	stream uint64
	// retention point: the log starts at retFirst (0: never trimmed)
	retFirst    uint64
	retPrevTerm uint64
	retStart    int64
	logStart    int64       // replicated retention point (first readable offset)
	st          state       // hard state saved before a truncation (maxTs unused)
	confs       []confEntry // sorted by index
	config      streamConfig
}

func (m *meta) encode() ([]byte, error) {
	b := make([]byte, metaFixed, 256)
	copy(b, metaMagic)
	le.PutUint64(b[8:], m.stream)
	le.PutUint64(b[16:], m.retFirst)
	le.PutUint64(b[24:], m.retPrevTerm)
	le.PutUint64(b[32:], uint64(m.retStart))
	le.PutUint32(b[40:], uint32(len(m.confs)))
	le.PutUint64(b[44:], m.st.term)
	le.PutUint64(b[52:], m.st.vote)
	le.PutUint64(b[60:], m.st.commit)
	le.PutUint64(b[68:], m.st.applied)
	le.PutUint64(b[76:], uint64(m.logStart))
	for _, c := range m.confs {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.cs)
		if err != nil {
			return nil, err
		}
		b = le.AppendUint64(b, c.index)
		b = le.AppendUint32(b, uint32(len(data)))
		b = append(b, data...)
	}
	// The stream's replicated config (config.go) follows the conf
	// history; a meta written before it existed ends here (no config).
	b = m.config.appendTo(b)
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) < metaFixed+4 || string(b[:8]) != metaMagic {
		return m, errors.New("bad meta header")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != le.Uint32(b[len(b)-4:]) {
		return m, errors.New("meta checksum mismatch")
	}
	m.stream = le.Uint64(b[8:])
	m.retFirst = le.Uint64(b[16:])
	m.retPrevTerm = le.Uint64(b[24:])
	m.retStart = int64(le.Uint64(b[32:]))
	n := le.Uint32(b[40:])
	m.st = state{term: le.Uint64(b[44:]), vote: le.Uint64(b[52:]), commit: le.Uint64(b[60:]), applied: le.Uint64(b[68:])}
	m.logStart = int64(le.Uint64(b[76:]))
	p := body[metaFixed:]
	for i := uint32(0); i < n; i++ {
		if len(p) < 12 {
			return m, errors.New("meta truncated")
		}
		idx, l := le.Uint64(p), le.Uint32(p[8:])
		p = p[12:]
		if uint64(l) > uint64(len(p)) {
			return m, errors.New("meta truncated")
		}
		cs := &pb.ConfState{}
		if err := proto.Unmarshal(p[:l], cs); err != nil {
			return m, fmt.Errorf("meta conf state: %w", err)
		}
		p = p[l:]
		if len(m.confs) > 0 && idx <= m.confs[len(m.confs)-1].index {
			return m, errors.New("meta conf history out of order")
		}
		m.confs = append(m.confs, confEntry{index: idx, cs: cs})
	}
	if len(p) > 0 {
		c, _, err := decodeStreamConfig(p)
		if err != nil {
			return m, fmt.Errorf("meta config: %w", err)
		}
		m.config = c
	}
	return m, nil
}

// loadMeta reads dir/meta; ok is false when there is none.
func loadMeta(fsys vfs.FS, dir string) (m meta, ok bool, err error) {
	name := path.Join(dir, metaName)
	size, err := fsys.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	if size > maxMetaSize {
		return m, false, fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, name, size)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return m, false, err
	}
	defer f.Close()
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n != len(b) && err != nil && err != io.EOF {
		return m, false, err
	} else if n != len(b) {
		return m, false, fmt.Errorf("%w: %s: short read", ErrCorrupt, name)
	}
	m, err = decodeMeta(b)
	if err != nil {
		return m, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	return m, true, nil
}

// saveMeta replaces dir/meta atomically and durably.
func saveMeta(fsys vfs.FS, dir string, m *meta) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	return vfs.ReplaceFile(fsys, dir, metaName, b) // via metaTmpName
}

// confAt returns the ConfState in force at index (empty if none). It is
// the log's own copy, shared and never changed (etcd raft's MemoryStorage
// shares its own the same way): callers read it, and copy it to change it.
// A copy per caller was kept by the node for every group it hosts.
func confAt(confs []confEntry, index uint64) *pb.ConfState {
	var cs *pb.ConfState
	for _, c := range confs {
		if c.index > index {
			break
		}
		cs = c.cs
	}
	if cs == nil {
		return pb.EnsureConfState(nil)
	}
	return cs
}
