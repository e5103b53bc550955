package simulator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// scenario is one script's cluster and what was acknowledged to it.
type scenario struct {
	s         *Sim
	acked     []scenarioWrite
	nextValue int
	reported  int   // simulator failures already printed
	killed    *node // the last node killed ("killed" names it)
}

// scenarioWrite is one acknowledged record.
type scenarioWrite struct {
	stream string
	value  string
	offset int64
}

// produceOutcome is what became of one produce.
type produceOutcome struct {
	value  string
	done   bool
	offset int64
	err    error
}

// start-cluster [nodes=3] [streams=1] [seed=1]: one datacenter, no
// nemesis, no background clients, no BUGGIFY: only the script acts.
// Waits for every stream to have a leader.
func (sc *scenario) startCluster(t *testing.T, d *datadriven.TestData) string {
	if sc.s != nil {
		d.Fatalf(t, "start-cluster twice")
	}
	cfg := Config{
		Seed:      uint64(intArg(t, d, "seed", 1)),
		Nodes:     intArg(t, d, "nodes", 3),
		Streams:   intArg(t, d, "streams", 1),
		DCs:       1,
		NoBuggify: true,
	}
	s, err := newSim(cfg)
	if err != nil {
		d.Fatalf(t, "start-cluster: %v", err)
	}
	sc.s = s
	s.w.after(0, nil, s.handshakes)
	for _, g := range s.groups {
		sc.waitLeader(g)
	}
	return sc.describe()
}

func (sc *scenario) status(t *testing.T, d *datadriven.TestData) string {
	return sc.describe()
}

// describe prints each stream as each node sees it.
func (sc *scenario) describe() string {
	var b strings.Builder
	for i, st := range sc.s.streams {
		g := sc.s.groups[i]
		fmt.Fprintf(&b, "%s:\n", st)
		for _, n := range sc.s.nodes {
			if n.down {
				fmt.Fprintf(&b, "  n%d down\n", n.id)
				continue
			}
			v := n.grp[g]
			role := strings.ToLower(strings.TrimPrefix(v.Role, "State"))
			fmt.Fprintf(&b, "  n%d %-12s term=%d end=%d\n", n.id, role, v.Term, v.HighWatermark)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// runFor advances simulated time by d in small slices until done holds;
// it reports whether done held.
func (sc *scenario) runFor(d time.Duration, done func() bool) bool {
	w := sc.s.w
	end := w.now + int64(d)
	for !done() {
		if w.now >= end {
			return false
		}
		w.run(min(end, w.now+int64(10*time.Millisecond)))
	}
	return true
}

// waitLeader runs up to 10 simulated seconds for a leader of group g.
func (sc *scenario) waitLeader(g uint64) *node {
	sc.runFor(10*time.Second, func() bool { return sc.s.leader(g) != nil })
	return sc.s.leader(g)
}

func (sc *scenario) group(t *testing.T, d *datadriven.TestData, stream string) uint64 {
	i := slices.Index(sc.s.streams, stream)
	if i < 0 {
		d.Fatalf(t, "no stream %q", stream)
	}
	return sc.s.groups[i]
}

// produce n=N [stream=s1]: N one-record produces through the leader's
// Kafka backend (acks=all), each waited for up to 10 simulated seconds.
func (sc *scenario) produce(t *testing.T, d *datadriven.TestData) string {
	st := streamArg(t, d)
	g := sc.group(t, d, st)
	want := intArg(t, d, "n", 1)
	var outs []*produceOutcome
	for range want {
		l := sc.waitLeader(g)
		if l == nil {
			break
		}
		outs = append(outs, sc.produceOn(l, st))
	}
	sc.runFor(10*time.Second, func() bool {
		return !slices.ContainsFunc(outs, func(o *produceOutcome) bool { return !o.done })
	})
	return sc.summarize(st, want, outs)
}

func (sc *scenario) produceOn(n *node, stream string) *produceOutcome {
	sc.nextValue++
	o := &produceOutcome{value: fmt.Sprintf("v%d", sc.nextValue)}
	s := sc.s
	s.w.runIn(n, func() {
		b := makeBatch(s.w.now/1e6, o.value)
		n.backend.Produce(stream, kafka.Records{Batches: b, Offsets: batchfmt.Offsets(b)}, func(p kafka.Produced, err error) {
			o.done, o.offset, o.err = true, p.Base, err
		})
		n.flush()
	})
	return o
}

// summarize reports a produce and remembers what was acknowledged.
func (sc *scenario) summarize(stream string, want int, outs []*produceOutcome) string {
	acked, failed, open := 0, 0, 0
	var first, next int64 = -1, -1
	for _, o := range outs {
		switch {
		case !o.done:
			open++
		case o.err != nil:
			failed++
		default:
			acked++
			sc.acked = append(sc.acked, scenarioWrite{stream: stream, value: o.value, offset: o.offset})
			if first < 0 {
				first = o.offset
			}
			next = o.offset + 1
		}
	}
	out := fmt.Sprintf("%s: acknowledged %d of %d", stream, acked, want)
	if acked > 0 {
		out += fmt.Sprintf(" at offsets [%d,%d)", first, next)
	}
	if failed > 0 {
		out += fmt.Sprintf("; %d failed", failed)
	}
	if open > 0 {
		out += fmt.Sprintf("; %d without an outcome", open)
	}
	if len(outs) < want {
		out += fmt.Sprintf("; %d not sent: no leader", want-len(outs))
	}
	return out
}

// nodeArg resolves the first bare argument: a node id, "killed" (the last
// node killed: scripts run against real processes too, where which node
// leads is not seeded), or "leader" (of
// stream=, s1 by default), so a script need not know who won an election.
func (sc *scenario) nodeArg(t *testing.T, d *datadriven.TestData) (*node, string) {
	arg := bare(t, d, 0)
	if arg == "killed" {
		if sc.killed == nil {
			d.Fatalf(t, "no node was killed")
		}
		return sc.killed, fmt.Sprintf("n%d", sc.killed.id)
	}
	if arg == "leader" {
		st := streamArg(t, d)
		l := sc.s.leader(sc.group(t, d, st))
		if l == nil {
			d.Fatalf(t, "no leader of %s", st)
		}
		return l, fmt.Sprintf("n%d (leader of %s)", l.id, st)
	}
	ids := nodeSet(t, d, arg)
	n := sc.s.node(ids[0])
	if len(ids) != 1 || n == nil {
		d.Fatalf(t, "no node %q", arg)
	}
	return n, fmt.Sprintf("n%d", n.id)
}

// kill X: the server process dies (what it wrote stays in the page cache).
func (sc *scenario) kill(t *testing.T, d *datadriven.TestData) string {
	n, name := sc.nodeArg(t, d)
	sc.s.w.record("script: kill n%d", n.id)
	n.stop(false)
	sc.killed = n
	return "killed " + name
}

// power-loss X: the server loses power: what it had not fsynced is lost
// (the restart checks it kept what it had reported durable).
func (sc *scenario) powerLoss(t *testing.T, d *datadriven.TestData) string {
	n, name := sc.nodeArg(t, d)
	sc.s.w.record("script: power loss of n%d", n.id)
	n.stop(true)
	sc.killed = n
	return "cut the power of " + name
}

func (sc *scenario) restartNode(t *testing.T, d *datadriven.TestData) string {
	n, name := sc.nodeArg(t, d)
	sc.s.restart(n)
	if n.down {
		return "could not restart " + name
	}
	return "restarted " + name
}

// partition A|B: cut every link between the node sets A and B
// ("1|2,3"), both ways.
func (sc *scenario) partition(t *testing.T, d *datadriven.TestData) string {
	left, right, ok := strings.Cut(bare(t, d, 0), "|")
	if !ok {
		d.Fatalf(t, "partition A|B, as in 1|2,3")
	}
	as, bs := nodeSet(t, d, left), nodeSet(t, d, right)
	for _, a := range as {
		for _, b := range bs {
			sc.s.cutLink(a, b, 1)
			sc.s.cutLink(b, a, 1)
		}
	}
	sc.s.w.record("script: partition %s | %s", nodeNames(as), nodeNames(bs))
	return fmt.Sprintf("cut %s from %s", nodeNames(as), nodeNames(bs))
}

// heal: every link works again (crashed nodes stay down: restart them).
func (sc *scenario) heal(t *testing.T, d *datadriven.TestData) string {
	sc.s.cut = map[[2]uint64]int{}
	sc.s.w.record("script: heal")
	return "healed every link"
}

// run DURATION: simulated time passes.
func (sc *scenario) run(t *testing.T, d *datadriven.TestData) string {
	dur := durationAt(t, d, 0)
	sc.s.w.run(sc.s.w.now + int64(dur))
	return "ran " + dur.String()
}
