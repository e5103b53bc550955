package memcluster

import (
	"fmt"
	"strings"
)

// Describe prints every group as each node sees it, nodes and groups in id
// order, one line per replica: role, term, commit, applied, last raft
// index, the offsets its log holds, and the membership. It reads only
// state that is a function of the seed, so scenario scripts can pin it.
func (c *Cluster) Describe() string {
	var b strings.Builder
	for _, g := range c.cfg.Groups {
		fmt.Fprintf(&b, "g%d:\n", g)
		for _, n := range c.nodes {
			fmt.Fprintf(&b, "  n%d %s\n", n.ID, n.describeGroup(g))
		}
	}
	return b.String()
}

func (n *Node) describeGroup(group uint64) string {
	if n.Down {
		return "down"
	}
	s, ok := n.Raft.Status(group)
	if !ok {
		return "not hosting the group"
	}
	l := n.Logs[group]
	last, err := l.LastIndex()
	if err != nil {
		return fmt.Sprintf("last index: %v", err)
	}
	line := fmt.Sprintf("%-12s term=%d commit=%d applied=%d last=%d offsets=[%d,%d) voters=%s",
		strings.ToLower(strings.TrimPrefix(s.Role, "State")), s.Term, s.Commit, s.Applied, last,
		l.StartOffset(), n.hwm[group], ids(s.Voters))
	if len(s.Learners) > 0 {
		line += " learners=" + ids(s.Learners)
	}
	return line
}

func ids(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return "(" + strings.Join(s, ",") + ")"
}
