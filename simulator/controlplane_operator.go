package simulator

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vdl-project/vdl/configserver"
)

// The control plane's operator (controlplane.go): creates, deletes and
// replica moves during the safety phase.

// operator does something every second or so during the safety phase:
// creates and deletes streams, starts and cancels moves, and now and then
// the config server leader is lost.
func (c *controlPlane) operator() {
	s := c.s
	if s.liveness {
		return
	}
	defer s.w.after(time.Duration(c.r.ExpFloat64()*float64(time.Second)), nil, c.operator)
	switch x := c.r.IntN(10); {
	case x < 3:
		c.create(false)
	case x < 5:
		c.deleteScratch()
	case x < 8:
		c.startMove()
	case x < 9:
		c.cancelMove()
	default:
		c.loseLeader(durn(c.r, 300*time.Millisecond, 3*time.Second), "nemesis")
	}
}

// create asks for a new stream; a workload stream gets clients once it
// exists. A third of the creates lose the config server leader on the way.
func (c *controlPlane) create(workload bool) {
	s := c.s
	c.nStream++
	name := fmt.Sprintf("x%d", c.nStream)
	if workload {
		name = fmt.Sprintf("c%d", c.nStream)
	}
	dc := ""
	if s.cfg.DCs > 1 {
		dc = fmt.Sprintf("dc%d", c.r.IntN(s.cfg.DCs))
	}
	cr := &cpCreate{name: name, workload: workload}
	c.creates[name] = cr
	c.tryCreate(cr, dc)
}

func (c *controlPlane) tryCreate(cr *cpCreate, dc string) {
	s := c.s
	cr.attempts++
	lose := c.r.IntN(3) == 0
	if c.leader == 0 {
		c.propose(cpCmd{}, func(err error) { c.created(cr, dc, err) })
		return
	}
	replicas, err := configserver.Place(c.candidates(), 3, dc)
	if err != nil {
		s.w.record("config: create %s: %v", cr.name, err)
		s.w.after(durn(c.r, 200*time.Millisecond, 500*time.Millisecond), nil, func() { c.created(cr, dc, err) })
		return
	}
	st := configserver.Stream{Name: cr.name, Replicas: replicas, Founders: slices.Sorted(slices.Values(replicas)), PreferredDC: dc,
		State: configserver.StreamActive, RetentionMs: -1, RetentionBytes: -1}
	for _, id := range replicas {
		st.Dirs = append(st.Dirs, s.node(id).dirID)
	}
	c.propose(cpCmd{kind: "create", name: cr.name, stream: st}, func(err error) { c.created(cr, dc, err) })
	if lose {
		// Mid-create: before or after the command commits.
		s.w.after(durn(c.r, 0, 12*time.Millisecond), nil, func() {
			c.loseLeader(durn(c.r, 300*time.Millisecond, 2*time.Second), "mid-create of "+cr.name)
		})
	}
}

// created is a create's answer: the operator retries an unknown outcome
// (or no leader, or no room yet); "exists" after an unknown outcome means
// the lost attempt created it.
func (c *controlPlane) created(cr *cpCreate, dc string, err error) {
	s := c.s
	s.w.record("config: create %s attempt %d: %v", cr.name, cr.attempts, err)
	switch {
	case err == nil:
		cr.oks++
	case errors.Is(err, configserver.ErrExists) && cr.unknown:
	case errors.Is(err, errCPUnknown) || errors.Is(err, errCPNoLeader) || errors.Is(err, configserver.ErrPlacement):
		cr.unknown = cr.unknown || errors.Is(err, errCPUnknown)
		if cr.attempts >= 20 || s.liveness {
			cr.gaveUp = true
			return
		}
		s.w.after(durn(c.r, 200*time.Millisecond, 600*time.Millisecond), nil, func() { c.tryCreate(cr, dc) })
		return
	default:
		s.fail(checkControlPlane, "create %s: unexpected answer %v", cr.name, err)
		return
	}
	st := c.streams[cr.name]
	if st == nil {
		s.fail(checkControlPlane, "create %s answered %v but the stream is not in the catalog", cr.name, err)
		return
	}
	if !cr.workload {
		c.scratch = append(c.scratch, cr.name)
		return
	}
	c.addWorkload(st)
}

// addWorkload adds a created stream to the checked ones, with its clients.
func (c *controlPlane) addWorkload(st *configserver.Stream) {
	s := c.s
	s.streams = append(s.streams, st.Name)
	s.groups = append(s.groups, st.Group)
	if s.workloadDone {
		return
	}
	for k := 0; k < s.cfg.Clients+s.cfg.Consumers; k++ {
		cl := s.newClient(len(s.clients), st.Name, false)
		cl.consumer = k >= s.cfg.Clients
		cl.idem = k < s.cfg.Clients-1 || s.cfg.Clients == 1
		cl.pid = 7000 + int64(cl.id)
		s.clients = append(s.clients, cl)
		s.w.after(time.Duration(k)*time.Millisecond, nil, cl.loop)
	}
}

func (c *controlPlane) deleteScratch() {
	if len(c.scratch) == 0 {
		return
	}
	i := c.r.IntN(len(c.scratch))
	name := c.scratch[i]
	c.scratch = slices.Delete(c.scratch, i, i+1)
	c.s.w.record("operator: delete %s", name)
	c.propose(cpCmd{kind: "delete", name: name}, func(err error) { c.s.w.record("config: delete %s: %v", name, err) })
}

// startMove moves a random replica of a random stream to a server that
// is not one (placement's choice, in the replica's DC when it can).
func (c *controlPlane) startMove() {
	s := c.s
	if c.leader == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(c.streams))
	if len(names) == 0 {
		return
	}
	st := c.streams[names[c.r.IntN(len(names))]]
	if c.moving(st.Group) {
		return
	}
	from := st.Replicas[c.r.IntN(len(st.Replicas))]
	var cands []configserver.Candidate
	for _, cd := range c.candidates() {
		if !slices.Contains(st.Replicas, cd.ID) && (st.FormerReplica(cd.ID) == nil || s.cfg.cpBreak == "move-back") {
			cands = append(cands, cd)
		}
	}
	to, err := configserver.Place(cands, 1, fmt.Sprintf("dc%d", s.node(from).dc))
	if err != nil {
		to, err = configserver.Place(cands, 1, "")
	}
	if err != nil {
		return
	}
	s.w.record("operator: move %s from n%d to n%d", st.Name, from, to[0])
	cancel := c.r.IntN(3) == 0
	after := durn(c.r, 0, 1500*time.Millisecond)
	c.propose(cpCmd{kind: "move-start", name: st.Name, from: from, to: to[0]}, func(err error) {
		s.w.record("config: move-start %s: %v", st.Name, err)
		if err == nil && cancel {
			// A third of the moves are cancelled at whatever step they
			// reached 0-1.5 s later.
			s.w.after(after, nil, func() {
				if m := c.moves[st.Name]; m != nil && m.State == configserver.MoveActive && !m.Cancel {
					s.w.record("operator: cancel the move of %s at %s", st.Name, m.Step)
					c.propose(cpCmd{kind: "move-cancel", name: st.Name}, func(err error) { s.w.record("config: move-cancel %s: %v", st.Name, err) })
				}
			})
		}
	})
}

func (c *controlPlane) cancelMove() {
	for _, name := range slices.Sorted(maps.Keys(c.moves)) {
		if m := c.moves[name]; m.State == configserver.MoveActive && !m.Cancel {
			c.s.w.record("operator: cancel the move of %s at %s", name, m.Step)
			c.propose(cpCmd{kind: "move-cancel", name: name}, func(err error) { c.s.w.record("config: move-cancel %s: %v", name, err) })
			return
		}
	}
}
