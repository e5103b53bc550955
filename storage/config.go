package storage

import (
	"errors"
	"maps"
	"slices"
)

// A stream's replicated config: key/value overrides (Kafka topic config
// names; the server gives them meaning) set by config commands in the
// stream's Raft log. Every replica applies the same commands in log
// order, so every replica holds the same config. The result lives in the
// meta file (it must outlive retention of the commands themselves) and
// travels with snapshots; index is the Raft index of the last command
// applied, so a command applied again after a restart changes nothing.

// ConfigOp is one change of a config command: set Key to Value, or delete
// it (back to the server's default).
type ConfigOp struct {
	Key, Value string
	Delete     bool
}

// Bounds of a config: they keep the meta file small.
const (
	maxConfigKeys  = 64
	maxConfigBytes = 16 << 10
)

// ErrConfigTooLarge: a config command would make the config exceed its bounds.
var ErrConfigTooLarge = errors.New("storage: stream config too large")

type streamConfig struct {
	index  uint64
	values map[string]string
}

// appendTo encodes c (keys sorted, so replicas write identical bytes).
func (c streamConfig) appendTo(b []byte) []byte {
	b = le.AppendUint64(b, c.index)
	b = le.AppendUint32(b, uint32(len(c.values)))
	for _, k := range slices.Sorted(maps.Keys(c.values)) {
		b = le.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		v := c.values[k]
		b = le.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func decodeStreamConfig(b []byte) (streamConfig, []byte, error) {
	bad := errors.New("bad stream config")
	if len(b) < 12 {
		return streamConfig{}, nil, bad
	}
	c := streamConfig{index: le.Uint64(b)}
	n := le.Uint32(b[8:])
	b = b[12:]
	if n > maxConfigKeys {
		return streamConfig{}, nil, bad
	}
	str := func() (string, bool) {
		if len(b) < 4 || uint64(le.Uint32(b)) > uint64(len(b)-4) {
			return "", false
		}
		l := le.Uint32(b)
		s := string(b[4 : 4+l])
		b = b[4+l:]
		return s, true
	}
	for range n {
		k, ok1 := str()
		v, ok2 := str()
		if !ok1 || !ok2 {
			return streamConfig{}, nil, bad
		}
		if c.values == nil {
			c.values = map[string]string{}
		}
		c.values[k] = v
	}
	return c, b, nil
}

// ConfigIndex is the Raft index of the last config command applied.
func (l *Log) ConfigIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.meta.config.index
}

// Config returns the stream's replicated config overrides (a copy).
func (l *Log) Config() map[string]string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return maps.Clone(l.meta.config.values)
}

// ApplyConfig applies the config command at Raft index: reset clears
// every override first (Kafka's AlterConfigs replaces a topic's whole
// config), then ops apply in order. A command at or below the index
// already applied is skipped (replayed after a restart). Durable on return.
func (l *Log) ApplyConfig(index uint64, reset bool, ops []ConfigOp) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	m := l.meta
	if index <= m.config.index {
		return nil
	}
	vals := maps.Clone(m.config.values)
	if reset || vals == nil {
		vals = map[string]string{}
	}
	for _, op := range ops {
		if op.Delete {
			delete(vals, op.Key)
		} else {
			vals[op.Key] = op.Value
		}
	}
	m.config = streamConfig{index: index, values: vals}
	if len(vals) > maxConfigKeys || len(m.config.appendTo(nil)) > maxConfigBytes {
		// Every replica refuses it alike: the command is a no-op but
		// its index counts as applied.
		m.config = streamConfig{index: index, values: l.meta.config.values}
	}
	return l.saveConfigMeta(m)
}

// adoptConfig takes a snapshot's config if it is newer than ours.
func (l *Log) adoptConfig(c streamConfig) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	if c.index <= l.meta.config.index {
		return nil
	}
	m := l.meta
	m.config = streamConfig{index: c.index, values: maps.Clone(c.values)}
	return l.saveConfigMeta(m)
}

// saveConfigMeta writes m (smu and wmu held) and makes it current.
func (l *Log) saveConfigMeta(m meta) error {
	if err := l.retryNoSpace(func() error { return saveMeta(l.fs, l.dir, &m) }); err != nil {
		return l.fail(err)
	}
	l.mu.Lock()
	l.meta = m
	l.mu.Unlock()
	return nil
}
