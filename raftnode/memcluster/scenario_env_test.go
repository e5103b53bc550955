package memcluster

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/vdl-project/vdl/raftnode"
)

// scenario is the state of one script: the cluster and what the script
// wrote to it, so check can verify nothing acknowledged was lost.
type scenario struct {
	c         *Cluster
	acked     []ackedWrite
	proposals []proposal // single proposals, reported by results
	nextValue int
}

// ackedWrite is a write the cluster acknowledged, with what it wrote.
type ackedWrite struct {
	group uint64
	res   raftnode.Complete
	value string // its one record's value
}

// proposal is one write proposed by `propose`, whose outcome is open.
type proposal struct {
	id      raftnode.ProposalID
	node    uint64
	group   uint64
	value   string
	counted bool // acknowledged and added to acked
}

type handler func(s *scenario, t *testing.T, d *datadriven.TestData) string

// handlers maps each command to the function that runs it.
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"add-nodes":       (*scenario).addNodes,
		"status":          (*scenario).status,
		"stabilize":       (*scenario).stabilize,
		"run":             (*scenario).run,
		"crash":           (*scenario).crash,
		"restart":         (*scenario).restart,
		"isolate":         (*scenario).isolate,
		"partition":       (*scenario).partition,
		"heal":            (*scenario).heal,
		"campaign":        (*scenario).campaign,
		"transfer-leader": (*scenario).transferLeader,
		"produce":         (*scenario).produce,
		"propose":         (*scenario).propose,
		"results":         (*scenario).results,
		"retain":          (*scenario).retain,
		"check":           (*scenario).check,
		"add-node":        (*scenario).addNode,
		"add-learner":     (*scenario).addLearner,
		"promote":         (*scenario).promote,
		"remove":          (*scenario).remove,
		"quiesced":        (*scenario).quiesced,
		"fence":           (*scenario).fence,
	}
}

func (s *scenario) handle(t *testing.T, d *datadriven.TestData) string {
	h, ok := handlers[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if s.c == nil && d.Cmd != "add-nodes" {
		d.Fatalf(t, "%s before add-nodes", d.Cmd)
	}
	return h(s, t, d)
}

func (s *scenario) close() {
	if s.c != nil {
		s.c.Close()
	}
}

// intArg returns the integer argument key, or def when it is absent.
func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func floatArg(t *testing.T, d *datadriven.TestData, key string, def float64) float64 {
	if !d.HasArg(key) {
		return def
	}
	var v string
	d.ScanArgs(t, key, &v)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return f
}

// groupArg is group=N, by default the first group.
func (s *scenario) groupArg(t *testing.T, d *datadriven.TestData) uint64 {
	return uint64(intArg(t, d, "group", int(s.c.cfg.Groups[0])))
}

// positional returns the i-th bare argument ("crash 2": "2").
func positional(t *testing.T, d *datadriven.TestData, i int) string {
	var bare []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			bare = append(bare, a.Key)
		}
	}
	if i >= len(bare) {
		d.Fatalf(t, "%s needs %d bare arguments", d.Cmd, i+1)
	}
	return bare[i]
}

// nodeAt resolves the i-th bare argument to a node: an id, or "leader" or
// "follower" of the group (so a script does not depend on who won an
// election). The name says which node it was.
func (s *scenario) nodeAt(t *testing.T, d *datadriven.TestData, i int) (*Node, string) {
	return s.resolve(t, d, positional(t, d, i))
}

func (s *scenario) resolve(t *testing.T, d *datadriven.TestData, arg string) (*Node, string) {
	g := s.groupArg(t, d)
	switch arg {
	case "leader":
		l := s.c.Leader(g)
		if l == nil {
			d.Fatalf(t, "no leader of g%d", g)
		}
		return l, fmt.Sprintf("n%d (leader of g%d)", l.ID, g)
	case "follower":
		l := s.c.Leader(g)
		i := slices.IndexFunc(s.c.nodes, func(n *Node) bool { return n != l && !n.Down })
		if i < 0 {
			d.Fatalf(t, "no follower of g%d up", g)
		}
		n := s.c.nodes[i]
		return n, fmt.Sprintf("n%d (follower of g%d)", n.ID, g)
	}
	id, err := strconv.ParseUint(arg, 10, 64)
	if err != nil || s.c.Node(id) == nil {
		d.Fatalf(t, "no node %q", arg)
	}
	return s.c.Node(id), fmt.Sprintf("n%d", id)
}
