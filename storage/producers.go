package storage

// The producer state snapshot: the idempotent-producer table of the stream
// (raftnode/producers) as of a committed Raft index, saved now and then by
// the replication engine so that a restart replays only the log after it.
// The log does not read it: it keeps the bytes and their index, replaces
// them atomically (write temp, Sync, Rename, SyncDir, as the meta file),
// ships them in its Raft snapshots and takes the newer of its own and a
// snapshot's when it installs one. It is a cache of what the log says: a
// file that does not check is ignored (logged) and the state rebuilt from
// the log, never a reason to stop.
//
//	file producers = "VDLPROD1" | u64 index | u32 length | data | u32 CRC-32C

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"

	"github.com/vdl-project/vdl/vfs"
)

const (
	producersName    = "producers"
	producersTmpName = "producers.tmp"
	producersMagic   = "VDLPROD1"
	// maxProducersSize bounds the file (and what a snapshot carries).
	maxProducersSize = 256 << 20
)

// producerState is the saved producer table and the index it is as of.
type producerState struct {
	index uint64
	data  []byte
}

// ProducerState returns the producer state saved last and the Raft index
// it is as of (0, nil: none).
func (l *Log) ProducerState() (uint64, []byte) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.prod.index, l.prod.data
}

// SaveProducerState replaces the saved producer state with data, as of
// index (a committed entry); durable on return. An older index than the
// one saved is ignored.
func (l *Log) SaveProducerState(index uint64, data []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	return l.saveProducers(producerState{index: index, data: data})
}

// saveProducers writes p if it is newer than what is saved; wmu is held.
func (l *Log) saveProducers(p producerState) error {
	if p.index < l.prod.index || (p.index == l.prod.index && l.prod.data != nil) {
		return nil
	}
	if len(p.data) > maxProducersSize {
		return fmt.Errorf("storage: producer state of %d bytes, at most %d", len(p.data), maxProducersSize)
	}
	b := make([]byte, 0, len(producersMagic)+16+len(p.data))
	b = append(b, producersMagic...)
	b = le.AppendUint64(b, p.index)
	b = le.AppendUint32(b, uint32(len(p.data)))
	b = append(b, p.data...)
	b = le.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := vfs.ReplaceFile(l.fs, l.dir, producersName, b); err != nil { // via producersTmpName
		return l.fail(err)
	}
	l.mu.Lock()
	l.prod = p
	l.mu.Unlock()
	return nil
}

// loadProducers reads the saved producer state (none, or one that does not
// check: zero).
func (l *Log) loadProducers() (producerState, error) {
	p, err := loadProducers(l.fs, l.dir)
	if errors.Is(err, ErrCorrupt) {
		l.log().Warn("producer state file unusable: rebuilding it from the log", "dir", l.dir, "err", err)
		return producerState{}, nil
	}
	return p, err
}

func loadProducers(fsys vfs.FS, dir string) (producerState, error) {
	name := path.Join(dir, producersName)
	size, err := fsys.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return producerState{}, nil
	}
	if err != nil {
		return producerState{}, err
	}
	if size < int64(len(producersMagic))+16 || size > maxProducersSize+64 {
		return producerState{}, fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, name, size)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return producerState{}, err
	}
	defer f.Close()
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n != len(b) && err != nil && err != io.EOF {
		return producerState{}, err
	} else if n != len(b) {
		return producerState{}, fmt.Errorf("%w: %s: short read", ErrCorrupt, name)
	}
	body := b[:len(b)-4]
	m := len(producersMagic)
	switch {
	case string(b[:m]) != producersMagic:
		return producerState{}, fmt.Errorf("%w: %s: bad header", ErrCorrupt, name)
	case crc32.Checksum(body, castagnoli) != le.Uint32(b[len(b)-4:]):
		return producerState{}, fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, name)
	case int64(le.Uint32(b[m+8:])) != size-int64(m)-16:
		return producerState{}, fmt.Errorf("%w: %s: bad length", ErrCorrupt, name)
	}
	return producerState{index: le.Uint64(b[m:]), data: body[m+12:]}, nil
}
