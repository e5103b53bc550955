package simulator

import (
	"fmt"
	"strings"
	"time"
)

// The watchdog: a seed that hangs fails, with its replay command and the
// engines' state, instead of hanging the batch. Three limits:
//
//   - wall clock: a seed taking longer than Config.WallLimit (default 60 s;
//     a seed normally takes 0.1-1 s) is stopped;
//   - events: more than Config.MaxEvents events (default 5M; a seed
//     normally runs 30k-150k) means work that outruns simulated time;
//   - flush rounds: an engine flush that does not settle within
//     maxFlushRounds rounds is a livelock at one simulated instant
//     (raftnode.NodeConfig.Watchdog watches the engine's own loop).
//
// The event and round limits are deterministic: the replay fails the same
// way. The wall-clock limit is not (it depends on the machine), so it is
// generous.
const (
	defaultWallLimit = 60 * time.Second
	defaultMaxEvents = 5_000_000
	maxFlushRounds   = 100_000
)

// watchdogAbort unwinds a run the watchdog stopped (Run recovers it).
type watchdogAbort struct{ why string }

func (w *world) watch() {
	if w.maxEvents > 0 && w.events > w.maxEvents {
		panic(watchdogAbort{fmt.Sprintf("%d events by %v of simulated time: work outruns simulated time", w.events, time.Duration(w.now))})
	}
	if !w.deadline.IsZero() && time.Now().After(w.deadline) {
		panic(watchdogAbort{fmt.Sprintf("wall-clock limit reached at %v of simulated time (%d events)", time.Duration(w.now), w.events)})
	}
}

// flushRound is the watchdog's look at a round of an engine flush.
func (n *node) flushRound(round int) {
	if round > maxFlushRounds {
		panic(watchdogAbort{fmt.Sprintf("n%d: an engine flush did not settle after %d rounds at %v: livelock", n.id, round, time.Duration(n.s.w.now))})
	}
	if round%1024 == 0 {
		n.s.w.watch()
	}
}

// state describes every engine's groups, for a watchdog failure.
func (s *Sim) state() string {
	var b strings.Builder
	for _, n := range s.nodes {
		if n.down || n.rn == nil {
			fmt.Fprintf(&b, "\n  n%d down", n.id)
			continue
		}
		for _, g := range n.rn.Groups() {
			st, ok := n.rn.Status(g)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "\n  n%d g%d %s term %d leader %d commit %d applied %d hwm %d voters %v learners %v",
				n.id, g, st.Role, st.Term, st.Leader, st.Commit, st.Applied, st.HighWatermark, st.Voters, st.Learners)
		}
	}
	return b.String()
}
