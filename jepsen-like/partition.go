package campaign

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vdl-project/vdl/failpoints"
)

// Partitions in network namespaces (Topology) are nft rules inside the
// servers' namespaces. Partitions of real processes on the loopback are made with the failpoint
// build's per-peer drops: each node of one side drops every raft message
// to and from the nodes of the other side (raftnode/dropTo and dropFrom
// with a list of peers). Kafka clients still reach every node, as in the
// simulator's partitions of raft links. A production build has no such
// drops: the step is skipped (INCOMPLETE), never faked.

var partitionFailpoints = []string{"raftnode/dropTo", "raftnode/dropFrom"}

// partition A|B: cut the links between the node sets A and B both ways;
// partition A>B: one way only (what A sends to B is lost, B's messages to
// A arrive).
func (r *runner) partition(cmd Command) (string, error) {
	const usage = "partition takes one argument: 1,2|3,4,5 (both ways) or 1>2,3 (one way)"
	if len(cmd.Args) != 1 {
		return "", errors.New(usage)
	}
	sep := "|"
	left, right, ok := strings.Cut(cmd.Args[0], sep)
	if !ok {
		sep = ">"
		if left, right, ok = strings.Cut(cmd.Args[0], sep); !ok {
			return "", errors.New(usage)
		}
	}
	a, err := r.nodeList(left)
	if err != nil {
		return "", err
	}
	b, err := r.nodeList(right)
	if err != nil {
		return "", err
	}
	pairs := cutPairs(a, b, sep == "|")
	if err := r.cut(pairs); err != nil {
		return "", err
	}
	how := "both ways"
	if sep == ">" {
		how = "one way: " + names(a) + " -> " + names(b)
	}
	kind := "partition"
	if sep == ">" {
		kind = "partition-oneway"
	}
	r.openFault("partition", kind, names(a)+sep+names(b))
	if r.net != nil {
		return fmt.Sprintf("cut %s from %s (%s; nft drops in the namespaces)", names(a), names(b), how), nil
	}
	return fmt.Sprintf("cut %s from %s (raft messages dropped %s)", names(a), names(b), how), nil
}

// cutPairs lists the directed links (from, to) to cut between a and b.
func cutPairs(a, b []uint64, both bool) [][2]uint64 {
	var pairs [][2]uint64
	for _, x := range a {
		for _, y := range b {
			pairs = append(pairs, [2]uint64{x, y})
			if both {
				pairs = append(pairs, [2]uint64{y, x})
			}
		}
	}
	return pairs
}

// cut adds the directed cuts to those in force: in network namespaces
// with nft rules (the sender drops what it sends, the receiver what it
// gets), on the loopback with the failpoint build's per-peer drops (the
// sender's dropTo, the receiver's dropFrom).
func (r *runner) cut(pairs [][2]uint64) error {
	r.cuts = append(r.cuts, pairs...)
	if r.net != nil {
		return r.net.Cut(r.cuts)
	}
	to, from := map[uint64][]uint64{}, map[uint64][]uint64{}
	for _, p := range r.cuts {
		to[p[0]] = append(to[p[0]], p[1])
		from[p[1]] = append(from[p[1]], p[0])
	}
	for _, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		for name, peers := range map[string][]uint64{"raftnode/dropTo": to[n.ID], "raftnode/dropFrom": from[n.ID]} {
			if len(peers) == 0 {
				continue
			}
			if err := r.failpoints(n.ID).Enable(name, dropTerm(peers)); err != nil {
				return r.noFailpoints("partitions", err)
			}
		}
	}
	return nil
}

func dropTerm(peers []uint64) string {
	slices.Sort(peers)
	peers = slices.Compact(peers)
	list := make([]string, len(peers))
	for i, p := range peers {
		list[i] = strconv.FormatUint(p, 10)
	}
	return fmt.Sprintf("return(%q)", strings.Join(list, ","))
}

// heal: every link works again.
func (r *runner) heal() (string, error) {
	r.cuts = nil
	r.closeFaults("partition")
	if r.net != nil {
		if err := r.net.Heal(); err != nil {
			return "", err
		}
		return "healed every link", nil
	}
	for _, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		for _, name := range partitionFailpoints {
			if err := r.failpoints(n.ID).Disable(name); err != nil {
				return "", r.noFailpoints("partitions", err)
			}
		}
	}
	return "healed every link", nil
}

func (r *runner) failpoints(id uint64) *failpoints.Client {
	n := r.c.Node(id)
	return &failpoints.Client{BaseURL: n.AdminBase, HTTP: n.AdminClient}
}

// noFailpoints says why a fault could not be made: a production build has
// no failpoints.
func (r *runner) noFailpoints(what string, err error) error {
	if errors.Is(err, failpoints.ErrNoControlPlane) {
		return fmt.Errorf("%s need the failpoint build (make build-failpoint; --bin bin/failpoint/vdl): %w", what, errUnsupported)
	}
	return err
}

func (r *runner) nodeList(s string) ([]uint64, error) {
	var ids []uint64
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || r.c.Node(id) == nil {
			return nil, fmt.Errorf("no node %q", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func names(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("n%d", id)
		if id > 100 {
			parts[i] = csName(id) // a config server
		}
	}
	return strings.Join(parts, ",")
}
