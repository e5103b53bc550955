package simulator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vdl-project/vdl/configserver"
)

// The control plane (Config.ControlPlane): three simulated config servers
// and an operator. The config servers' replicated state (the catalog of
// streams, their tombstones and moves) is a list of commands committed by
// the config server leader, which fails and is replaced; what the leader
// decides comes from the production decision functions, on the simulated
// clock: configserver.Place for a new stream's replicas,
// configserver.NextMoveAction for each step of a replica move, and
// configserver.PlanTransfers for the preferred-DC leader balancer. The data
// servers start the groups assigned to them — founding a new stream's group
// on the dirs it was placed on, joining it empty when moved in — and remove
// the groups of deleted streams and of replicas moved away.
//
// Everything is drawn from the seed (the "controlplane" stream), runs in
// the simulator's one goroutine and iterates in sorted order.
//
// Failure cases: the config server leader is lost, often in the middle of
// a create (the create is committed or lost; its answer is lost either
// way, the operator retries, and the stream must exist exactly once or not
// at all); moves run under the nemesis' partitions, kills and pauses, and
// some are cancelled; DC isolation and power loss move leaders out of
// their preferred DC. After the heal, liveness: every move ends, every
// server hosts exactly what it is assigned, every deleted stream's data is
// gone, and every stream's leader is back in its preferred DC
// (checkControlPlane).

const (
	cpRound        = 200 * time.Millisecond // a config server leader's round: reports, assignments, moves, balancer
	cpDownAfter    = 2 * time.Second        // down_after_ms
	cpBalanceAfter = 2 * time.Second        // balance_after_ms
	cpMaxTransfers = 4                      // max_transfers_per_sec, per round
	cpFirstGroup   = 100                    // dynamic groups' ids start here
)

var (
	errCPUnknown  = errors.New("config server leader lost: outcome unknown")
	errCPNoLeader = errors.New("no config server leader")
)

// cpCmd is one replicated command of the config servers.
type cpCmd struct {
	kind     string // create, delete, move-start, move-step, move-cancel, move-end, purge, former-released
	name     string
	stream   configserver.Stream // create: as placed by the leader
	group    uint64              // purge
	from, to uint64
	step     string
	reason   string
}

type cpProposal struct {
	cmd  cpCmd
	done func(error)
}

// controlPlane is the simulated config servers.
type controlPlane struct {
	s *Sim
	r *rand.Rand

	up     [3]bool
	leader int // 1-3; 0: electing
	term   int
	since  int64 // when the leader took over

	// The replicated state.
	streams   map[string]*configserver.Stream // active streams by name
	tombs     map[uint64]*configserver.Stream // deleted streams until stopped everywhere
	moves     map[string]*configserver.Move   // the latest move of each stream
	nextGroup uint64
	applied   int

	inflight []*cpProposal

	// The leader's soft state (lost with it).
	heard     map[uint64]int64                               // node -> last report
	reports   map[uint64]map[uint64]configserver.GroupReport // node -> group -> its report
	leaders   map[uint64]uint64                              // group -> reported leader
	mem       configserver.BalanceMemory
	recording map[string]bool  // moves with a step being recorded
	changing  map[uint64]int64 // group -> until when a membership change is in flight

	// The operator and the checks' history.
	creates  map[string]*cpCreate
	scratch  []string // created streams the operator may delete
	nStream  int
	founded  map[[2]uint64]int   // (node, group) -> bootstraps
	bootedAs map[uint64][]uint64 // group -> the voters its first founder bootstrapped it with
	counts   map[string]int
	released map[string]bool // "stream/node": a former replica released (moves back to it are counted)
	healedAt int64
}

// cpCreate is one stream the operator asked for.
type cpCreate struct {
	name      string
	workload  bool
	attempts  int
	oks       int  // answers "created"
	unknown   bool // an attempt's outcome was unknown
	gaveUp    bool
	committed int // creates of the name the state machine applied
}

func newControlPlane(s *Sim) *controlPlane {
	return &controlPlane{s: s, r: s.w.stream("controlplane"), up: [3]bool{true, true, true}, leader: 1,
		streams: map[string]*configserver.Stream{}, tombs: map[uint64]*configserver.Stream{}, moves: map[string]*configserver.Move{},
		nextGroup: cpFirstGroup, heard: map[uint64]int64{}, reports: map[uint64]map[uint64]configserver.GroupReport{},
		leaders: map[uint64]uint64{}, mem: newBalanceMemory(), recording: map[string]bool{}, changing: map[uint64]int64{},
		creates: map[string]*cpCreate{}, founded: map[[2]uint64]int{}, bootedAs: map[uint64][]uint64{}, counts: map[string]int{},
		released: map[string]bool{}}
}

func newBalanceMemory() configserver.BalanceMemory {
	return configserver.BalanceMemory{Outside: map[string]time.Time{}, Last: map[string]time.Time{}}
}

// staticGroups are the groups every server hosts from the start.
// (Clipped: appending to it must not write over the dynamic groups.)
func (s *Sim) staticGroups() []uint64 { return s.groups[:s.cfg.Streams:s.cfg.Streams] }

// moving reports whether g's stream has an active move.
func (c *controlPlane) moving(g uint64) bool {
	if c == nil {
		return false
	}
	for _, m := range c.moves {
		if m.Group == g && m.State == configserver.MoveActive {
			return true
		}
	}
	return false
}

func (c *controlPlane) now() time.Time { return time.UnixMilli(c.s.w.now / 1e6) }

func (c *controlPlane) record(format string, args ...any) {
	c.s.w.record("config%d: %s", c.leader, fmt.Sprintf(format, args...))
}

// start schedules the config servers' rounds and the operator.
func (c *controlPlane) start() {
	w := c.s.w
	w.after(cpRound, nil, c.round)
	w.after(durn(c.r, 100*time.Millisecond, 500*time.Millisecond), nil, func() { c.create(true) })
	w.after(durn(c.r, 2*time.Second, 5*time.Second), nil, func() { c.create(true) })
	w.after(durn(c.r, 500*time.Millisecond, time.Second), nil, c.operator)
}

// --- the replicated log ---

// propose submits cmd on the leader; done gets its outcome (errCPUnknown
// when the leader was lost before answering).
func (c *controlPlane) propose(cmd cpCmd, done func(error)) {
	w := c.s.w
	if c.leader == 0 {
		w.after(time.Millisecond, nil, func() { done(errCPNoLeader) })
		return
	}
	p := &cpProposal{cmd: cmd, done: done}
	c.inflight = append(c.inflight, p)
	term := c.term
	w.after(durn(c.r, time.Millisecond, 15*time.Millisecond), nil, func() {
		if c.term != term || !slices.Contains(c.inflight, p) {
			return // the leader was lost: settled then
		}
		c.inflight = slices.DeleteFunc(c.inflight, func(x *cpProposal) bool { return x == p })
		p.done(c.apply(p.cmd))
	})
}

// loseLeader stops the config server leader for d: each command in flight
// was committed by the quorum before it died, or lost; either way its
// answer is lost. Another config server is elected after an election
// timeout, with none of the old leader's soft state.
func (c *controlPlane) loseLeader(d time.Duration, why string) {
	if c.leader == 0 {
		return
	}
	w := c.s.w
	old := c.leader
	w.fault("config-leader-loss", "config%d (config server leader) down for %v: %s; %d commands in flight", old, d, why, len(c.inflight))
	c.up[old-1] = false
	c.leader = 0
	c.term++
	inflight := c.inflight
	c.inflight = nil
	for _, p := range inflight {
		if c.r.IntN(2) == 0 {
			err := c.apply(p.cmd)
			w.record("config: %s %s committed before the leader died (%v)", p.cmd.kind, p.cmd.name, err)
		} else {
			w.record("config: %s %s lost with the leader", p.cmd.kind, p.cmd.name)
		}
		done := p.done
		w.after(durn(c.r, 50*time.Millisecond, 500*time.Millisecond), nil, func() { done(errCPUnknown) })
	}
	w.after(d, nil, func() {
		c.up[old-1] = true
		w.record("config%d back", old)
		if c.leader == 0 {
			c.elect()
		}
	})
	w.after(durn(c.r, 300*time.Millisecond, time.Second), nil, c.elect)
}

// elect makes an up config server the leader, with a fresh soft state.
func (c *controlPlane) elect() {
	if c.leader != 0 {
		return
	}
	var ups []int
	for i, u := range c.up {
		if u {
			ups = append(ups, i+1)
		}
	}
	if len(ups) < 2 {
		return // no quorum: elected when one comes back
	}
	c.leader = ups[c.r.IntN(len(ups))]
	c.term++
	c.since = c.s.w.now
	c.heard, c.reports, c.leaders = map[uint64]int64{}, map[uint64]map[uint64]configserver.GroupReport{}, map[uint64]uint64{}
	c.mem, c.recording, c.changing = newBalanceMemory(), map[string]bool{}, map[uint64]int64{}
	c.record("leads (term %d)", c.term)
}

// apply applies a committed command to the catalog.
func (c *controlPlane) apply(cmd cpCmd) error {
	c.applied++
	switch cmd.kind {
	case "create":
		if _, ok := c.streams[cmd.name]; ok {
			return fmt.Errorf("%w: stream %s exists", configserver.ErrExists, cmd.name)
		}
		st := cmd.stream
		st.Group = c.nextGroup
		c.nextGroup++
		c.streams[st.Name] = &st
		if cr := c.creates[st.Name]; cr != nil {
			cr.committed++
		}
		c.s.w.record("config: created %s: group %d on %v (preferred dc %q)", st.Name, st.Group, st.Replicas, st.PreferredDC)
	case "delete":
		st, ok := c.streams[cmd.name]
		if !ok {
			return fmt.Errorf("%w: stream %s", configserver.ErrNotFound, cmd.name)
		}
		st.State = configserver.StreamDeleting
		c.tombs[st.Group] = st
		delete(c.streams, cmd.name)
		delete(c.moves, cmd.name)
		c.counts["deletes"]++
		c.s.w.record("config: deleted %s (group %d)", st.Name, st.Group)
	case "purge":
		delete(c.tombs, cmd.group)
	case "move-start":
		st, ok := c.streams[cmd.name]
		switch {
		case !ok:
			return fmt.Errorf("%w: stream %s", configserver.ErrNotFound, cmd.name)
		case c.moves[cmd.name] != nil && c.moves[cmd.name].State == configserver.MoveActive:
			return fmt.Errorf("%w: %s already has a move", configserver.ErrExists, cmd.name)
		}
		former := st.Former
		if c.s.cfg.cpBreak == "move-back" {
			st.Former = nil // broken on purpose: back to a server it left
		}
		err := st.StartMove(cmd.from, cmd.to)
		st.Former = former
		if err != nil {
			return err
		}
		if c.released[fmt.Sprintf("%s/%d", cmd.name, cmd.to)] {
			c.counts["move-back"]++ // to a server the stream left, released since
		}
		c.moves[cmd.name] = &configserver.Move{Stream: st.Name, Group: st.Group, From: cmd.from, To: cmd.to,
			Step: configserver.StepAddLearner, State: configserver.MoveActive}
	case "former-released":
		st, ok := c.streams[cmd.name]
		if !ok {
			return fmt.Errorf("%w: stream %s", configserver.ErrNotFound, cmd.name)
		}
		if err := st.ReleaseFormer(cmd.to); err != nil {
			return err
		}
		c.released[fmt.Sprintf("%s/%d", cmd.name, cmd.to)] = true
		c.counts["formers-released"]++
		c.s.w.record("config: n%d no longer a former replica of %s", cmd.to, cmd.name)
	case "move-step", "move-cancel", "move-end":
		m := c.moves[cmd.name]
		st := c.streams[cmd.name]
		if m == nil || m.State != configserver.MoveActive || st == nil {
			return fmt.Errorf("%w: no active move of %s", configserver.ErrNotFound, cmd.name)
		}
		switch cmd.kind {
		case "move-step":
			if err := configserver.CheckMoveStep(*m); err != nil {
				return err
			}
			m.Step = cmd.step
		case "move-cancel":
			if err := configserver.CheckMoveCancel(*m); err != nil {
				return err
			}
			m.Cancel = true
		case "move-end":
			if err := st.EndMove(*m, cmd.step); err != nil {
				return err
			}
			m.State, m.Reason = cmd.step, cmd.reason
			c.counts["move-"+cmd.step]++
			c.s.w.record("config: move of %s from n%d to n%d %s (%s); replicas %v", m.Stream, m.From, m.To, cmd.step, cmd.reason, st.Replicas)
		}
	}
	return nil
}
