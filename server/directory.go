package server

import (
	"slices"
	"strings"
	"sync"
)

// directory is what a server knows of the cluster: its peers and its
// streams. A statically configured server takes both from its
// configuration; with config servers they come from the assignment the
// config servers answer its reports with (controlplane.go), and change at
// runtime.
type directory struct {
	mu      sync.RWMutex
	peers   []Peer
	streams []StreamConfig // by name
	leaders map[string]uint64
}

func newDirectory(peers []Peer, streams []StreamConfig) *directory {
	d := &directory{}
	d.set(peers, streams)
	return d
}

func (d *directory) set(peers []Peer, streams []StreamConfig) {
	streams = slices.Clone(streams)
	slices.SortFunc(streams, func(a, b StreamConfig) int { return strings.Compare(a.Name, b.Name) })
	d.mu.Lock()
	defer d.mu.Unlock()
	if peers != nil {
		d.peers = slices.Clone(peers)
	}
	if streams != nil {
		d.streams = streams
	}
}

func (d *directory) setLeaders(l map[string]uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaders = l
}

// Peers are the servers of the cluster, this one included.
func (d *directory) Peers() []Peer {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.peers
}

// Peer returns the peer with id.
func (d *directory) Peer(id uint64) (Peer, bool) {
	for _, p := range d.Peers() {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}

// Streams are the cluster's streams, by name.
func (d *directory) Streams() []StreamConfig {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.streams
}

// Stream returns a stream by name.
func (d *directory) Stream(name string) (StreamConfig, bool) {
	streams := d.Streams()
	i, ok := slices.BinarySearchFunc(streams, name, func(s StreamConfig, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return StreamConfig{}, false
	}
	return streams[i], true
}

// LeaderHint is a stream's leader as the config servers last heard.
func (d *directory) LeaderHint(name string) uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.leaders[name]
}
