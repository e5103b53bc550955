package clustertest

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/raftnode"
)

// Network faults: links cut one way or both, nodes isolated, all healed.
// Servers talk over real TCP; a cut drops messages at the sender.

// filterSender drops messages on links the cluster has cut.
type filterSender struct {
	c    *Cluster
	from uint64
	next raftnode.Sender
}

func (f *filterSender) Send(group uint64, m *raftpb.Message) {
	if f.c.isCut(f.from, m.GetTo()) {
		return
	}
	f.next.Send(group, m)
}

func (c *Cluster) isCut(from, to uint64) bool {
	c.cutMu.RLock()
	defer c.cutMu.RUnlock()
	return c.cut[[2]uint64{from, to}]
}

// CutOneWay drops every message from a to b.
func (c *Cluster) CutOneWay(a, b uint64) {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	c.cut[[2]uint64{a, b}] = true
}

// Partition cuts both directions between a and b.
func (c *Cluster) Partition(a, b uint64) {
	c.CutOneWay(a, b)
	c.CutOneWay(b, a)
}

// Isolate cuts id off from every other server (both directions).
func (c *Cluster) Isolate(id uint64) {
	for _, o := range c.all() {
		if o.ID != id {
			c.Partition(id, o.ID)
		}
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	c.cut = map[[2]uint64]bool{}
}
