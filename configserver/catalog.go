package configserver

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// The catalog cache: the servers and streams decoded from the state
// database, in key order, kept up to date record by record.
//
// Every report, placement and balancer round reads the whole catalog, and
// every create changes it. Decoding all of it after each change (or even
// comparing every record's bytes to find the changed ones) made creating
// N streams take time in N²: at 10,000 streams, most of a config server's
// work. So an Apply tells the cache which records it wrote or deleted
// (putJSON and deleteKey note them on their transaction), and the cache
// patches just those in a copy of its slices: readers hold the old ones,
// shared and never changed.

// catalogCache is the decoded catalog; valid false means decode it all
// at the next read (at the start, or after an Apply that failed).
type catalogCache struct {
	sync.Mutex
	valid   bool
	servers cached[Server]
	streams cached[Stream]
	// byGroup indexes streams by group (the first stream of each), made
	// on first use after each change: every report asks it.
	byGroup map[uint64]int
}

// cached is one bucket's records decoded, in key order.
type cached[T any] struct {
	keys [][]byte
	vals []T
}

// touched is what one transaction wrote to the catalog's buckets: each
// key's last value (nil: deleted).
type touched struct {
	servers, streams map[string][]byte
}

// touches maps each tracked write transaction to what it touched. Several
// State databases apply at once (three config servers in one process), so
// this is a map, not one variable.
var touches sync.Map // *bolt.Tx -> *touched

func track(tx *bolt.Tx) *touched {
	t := &touched{servers: map[string][]byte{}, streams: map[string][]byte{}}
	touches.Store(tx, t)
	return t
}

func untrack(tx *bolt.Tx) { touches.Delete(tx) }

// touch notes that k was set to v (nil: deleted) in bucket b, if b is one
// of the catalog's buckets in a tracked transaction.
func touch(b *bolt.Bucket, k, v []byte) {
	tx := b.Tx()
	x, ok := touches.Load(tx)
	if !ok {
		return
	}
	t := x.(*touched)
	switch b {
	case tx.Bucket(bServers):
		t.servers[string(k)] = bytes.Clone(v)
	case tx.Bucket(bStreams):
		t.streams[string(k)] = bytes.Clone(v)
	}
}

// update takes an Apply's writes into the cache; after a failed Apply it
// decodes everything again at the next read.
func (c *catalogCache) update(t *touched, err error) {
	c.Lock()
	defer c.Unlock()
	if err != nil || t == nil || !c.valid {
		c.valid = false
		return
	}
	if len(t.servers) > 0 {
		c.servers = c.servers.patched(t.servers)
	}
	if len(t.streams) > 0 {
		c.streams, c.byGroup = c.streams.patched(t.streams), nil
	}
}

// patched is a copy of c with the records in changes set or deleted. A
// record that no longer decodes is dropped, as a full decode drops it.
func (c cached[T]) patched(changes map[string][]byte) cached[T] {
	out := cached[T]{keys: slices.Clone(c.keys), vals: slices.Clone(c.vals)}
	for k, raw := range changes { // each key once: the order does not matter
		key := []byte(k)
		i, found := slices.BinarySearchFunc(out.keys, key, bytes.Compare)
		var v T
		keep := raw != nil && json.Unmarshal(raw, &v) == nil
		switch {
		case found && keep:
			out.vals[i] = v
		case found:
			out.keys, out.vals = slices.Delete(out.keys, i, i+1), slices.Delete(out.vals, i, i+1)
		case keep:
			out.keys, out.vals = slices.Insert(out.keys, i, key), slices.Insert(out.vals, i, v)
		}
	}
	return out
}

// decodeAll reads a bucket's records in key order.
func decodeAll[T any](b *bolt.Bucket) cached[T] {
	var c cached[T]
	_ = b.ForEach(func(k, raw []byte) error {
		var v T
		if json.Unmarshal(raw, &v) == nil {
			c.keys, c.vals = append(c.keys, bytes.Clone(k)), append(c.vals, v)
		}
		return nil
	})
	return c
}

// catalog returns the servers and streams, decoding them all only when
// the cache is not valid.
func (s *State) catalog() ([]Server, []Stream) {
	s.cache.Lock()
	defer s.cache.Unlock()
	s.loadLocked()
	return s.cache.servers.vals, s.cache.streams.vals
}

// loadLocked decodes the whole catalog if the cache is not valid.
func (s *State) loadLocked() {
	if !s.cache.valid {
		_ = s.db.View(func(tx *bolt.Tx) error {
			s.cache.servers = decodeAll[Server](tx.Bucket(bServers))
			s.cache.streams = decodeAll[Stream](tx.Bucket(bStreams))
			return nil
		})
		s.cache.byGroup = nil
		s.cache.valid = true
	}
}

// streamsByGroup is Streams with an index of them by group (the first
// stream of each). Both are shared: read them, never change them.
func (s *State) streamsByGroup() ([]Stream, map[uint64]int) {
	s.cache.Lock()
	defer s.cache.Unlock()
	s.loadLocked()
	if s.cache.byGroup == nil {
		s.cache.byGroup = groupIndex(s.cache.streams.vals)
	}
	return s.cache.streams.vals, s.cache.byGroup
}

func groupIndex(streams []Stream) map[uint64]int {
	out := make(map[uint64]int, len(streams))
	for i, st := range streams {
		if _, dup := out[st.Group]; !dup {
			out[st.Group] = i
		}
	}
	return out
}

// invalidate drops the decoded catalog: the next read decodes it all. For
// writes that bypass putJSON and deleteKey (a whole state copied in).
func (s *State) invalidate() {
	s.cache.Lock()
	s.cache.valid = false
	s.cache.Unlock()
}
