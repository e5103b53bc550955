package memcluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/vdl-project/vdl/rng"
	"github.com/vdl-project/vdl/vfs"
)

// AddNode starts a new server with empty logs for every group: it is no
// member of any group until a membership change adds it, and then catches
// up from the leader (a snapshot first, as its log is empty).
func (c *Cluster) AddNode(id uint64) (*Node, error) {
	if c.Node(id) != nil {
		return nil, fmt.Errorf("node %d exists", id)
	}
	n := &Node{ID: id, FS: vfs.NewMem(), c: c, crash: rng.New(c.cfg.Seed, fmt.Sprintf("crash-%d", id))}
	if err := n.FS.MkdirAll(n.dir()); err != nil {
		return nil, err
	}
	if err := errors.Join(n.FS.SyncDir("/"), n.FS.SyncDir(n.dir())); err != nil {
		return nil, err
	}
	if err := n.start(); err != nil {
		return nil, err
	}
	c.record("add n%d", id)
	c.nodes = append(c.nodes, n)
	slices.SortFunc(c.nodes, func(a, b *Node) int { return cmp.Compare(a.ID, b.ID) })
	return n, nil
}
