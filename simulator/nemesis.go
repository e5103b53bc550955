package simulator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/vfs"
)

// The nemesis injects one fault every ~500 ms of simulated time (an
// exponential gap) while fewer than three fault windows are open, during
// the safety phase only. Each fault is drawn by weight from the table
// below; most open a window that ends after 200 ms-3 s and undoes them.

// A Fault is one kind of fault the nemesis injects.
//
// The values are in draw order (the names' sorted order, the opt-in
// corruption faults last): the nemesis walks the table in this order to
// turn a random number into a fault, so reordering it changes every seed's
// run and breaks the regression seeds.
type Fault int

const (
	// FaultClog delays one link by 50-500 ms.
	FaultClog Fault = iota
	// FaultDiskEIO fails a node's next fsync or write with EIO.
	FaultDiskEIO
	// FaultDiskFull leaves a node's disk a few KiB of room (ENOSPC).
	FaultDiskFull
	// FaultDiskSlow makes a node's fsyncs slow.
	FaultDiskSlow
	// FaultIsolateDC cuts a whole DC off from the others (clients too, half the time).
	FaultIsolateDC
	// FaultIsolateLeader cuts a leader off from its peers, not from its
	// clients, with its clock 5-20x slow: only a read fence stops a stale read.
	FaultIsolateLeader
	// FaultIsolateNode cuts one node off from the others (clients too, half the time).
	FaultIsolateNode
	// FaultKill stops a process; its disk keeps everything written.
	FaultKill
	// FaultLeaderTransfer asks a group's leader to hand over to another node.
	FaultLeaderTransfer
	// FaultMembership demotes a voter to learner, or promotes the demoted one back.
	FaultMembership
	// FaultPartition cuts the raft links between two nodes both ways.
	FaultPartition
	// FaultPartitionOneway cuts the raft link between two nodes one way.
	FaultPartitionOneway
	// FaultPause freezes a process: its events are held until it resumes.
	FaultPause
	// FaultPowerLoss stops a process and loses what it had not fsynced.
	FaultPowerLoss
	// FaultPowerLossDC is a power loss of every node of one DC.
	FaultPowerLossDC
	// FaultRetention is an operator's retention request around the high watermark.
	FaultRetention
	// FaultWipeDisk replaces a node's disk with an empty one (replace.go).
	FaultWipeDisk
	// FaultBitflip flips a bit in a victim's segment file (Config.BitFlips).
	FaultBitflip
	// FaultMisdirect makes a victim's next write land off target (Config.BitFlips).
	FaultMisdirect

	numFaults
)

// faultNames are the faults' names, as traces, Result.Faults,
// Config.Weights and docs/simulation.md spell them. They stay out of the
// table below: the inject functions print them, and a table holding both
// would be an initialization cycle.
var faultNames = [numFaults]string{
	FaultClog:            "clog",
	FaultDiskEIO:         "disk-eio",
	FaultDiskFull:        "disk-enospc",
	FaultDiskSlow:        "disk-slow",
	FaultIsolateDC:       "isolate-dc",
	FaultIsolateLeader:   "isolate-leader",
	FaultIsolateNode:     "isolate-node",
	FaultKill:            "kill",
	FaultLeaderTransfer:  "leader-transfer",
	FaultMembership:      "membership",
	FaultPartition:       "partition",
	FaultPartitionOneway: "partition-oneway",
	FaultPause:           "pause",
	FaultPowerLoss:       "power-loss",
	FaultPowerLossDC:     "power-loss-dc",
	FaultRetention:       "retention",
	FaultWipeDisk:        "wipe-disk",
	FaultBitflip:         "bitflip",
	FaultMisdirect:       "misdirect",
}

// A faultSpec is a fault's row in the nemesis table.
type faultSpec struct {
	weight int // default weight
	// corruption marks the opt-in faults: weight 0 without Config.BitFlips.
	corruption bool
	// inject injects the fault for about d (some ignore d).
	inject func(s *Sim, f Fault, d time.Duration)
}

// faults is the nemesis table, indexed by Fault.
var faults = [numFaults]faultSpec{
	FaultClog:            {weight: 2, inject: (*Sim).injectClog},
	FaultDiskEIO:         {weight: 1, inject: (*Sim).injectDiskEIO},
	FaultDiskFull:        {weight: 1, inject: (*Sim).injectDiskFull},
	FaultDiskSlow:        {weight: 2, inject: (*Sim).injectDiskSlow},
	FaultIsolateDC:       {weight: 2, inject: (*Sim).injectIsolate},
	FaultIsolateLeader:   {weight: 3, inject: (*Sim).injectIsolateLeader},
	FaultIsolateNode:     {weight: 3, inject: (*Sim).injectIsolate},
	FaultKill:            {weight: 3, inject: (*Sim).injectStop},
	FaultLeaderTransfer:  {weight: 2, inject: (*Sim).injectLeaderTransfer},
	FaultMembership:      {weight: 1, inject: (*Sim).injectMembership},
	FaultPartition:       {weight: 3, inject: (*Sim).injectPartition},
	FaultPartitionOneway: {weight: 2, inject: (*Sim).injectPartition},
	FaultPause:           {weight: 2, inject: (*Sim).injectPause},
	FaultPowerLoss:       {weight: 3, inject: (*Sim).injectStop},
	FaultPowerLossDC:     {weight: 1, inject: (*Sim).injectStop},
	FaultRetention:       {weight: 2, inject: (*Sim).injectRetention},
	FaultWipeDisk:        {weight: 1, inject: (*Sim).injectWipeDisk},
	FaultBitflip:         {weight: 2, corruption: true, inject: (*Sim).injectCorruption},
	FaultMisdirect:       {weight: 1, corruption: true, inject: (*Sim).injectCorruption},
}

// String is the fault's name, as traces and Result.Faults print it.
func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return fmt.Sprintf("Fault(%d)", int(f))
	}
	return faultNames[f]
}

// FaultKinds lists the nemesis fault kinds (without the opt-in ones).
func FaultKinds() []string {
	var kinds []string
	for f := range numFaults {
		if !faults[f].corruption {
			kinds = append(kinds, faultNames[f])
		}
	}
	return kinds
}

// weight is f's weight in this run: Config.Weights overrides the table,
// and the corruption faults weigh nothing without Config.BitFlips.
func (s *Sim) weight(f Fault) int {
	if faults[f].corruption && !s.cfg.BitFlips {
		return 0
	}
	if w, ok := s.cfg.Weights[faultNames[f]]; ok {
		return w
	}
	return faults[f].weight
}

// nemesis injects a fault and schedules its next turn.
func (s *Sim) nemesis() {
	if s.liveness {
		return
	}
	defer s.w.after(time.Duration(s.nemR.ExpFloat64()*float64(500*time.Millisecond)), nil, s.nemesis)
	if s.openWindows() >= 3 {
		return
	}
	if f, ok := s.drawFault(); ok {
		s.inject(f)
	}
}

// drawFault draws a fault by weight (one draw from the nemesis stream,
// none when every weight is 0).
func (s *Sim) drawFault() (Fault, bool) {
	total := 0
	for f := range numFaults {
		total += s.weight(f)
	}
	if total == 0 {
		return 0, false
	}
	x := s.nemR.IntN(total)
	for f := range numFaults {
		if x < s.weight(f) {
			return f, true
		}
		x -= s.weight(f)
	}
	panic("simulator: fault draw past the table's total weight")
}

// inject injects f. The window's length is drawn first, whatever the
// fault, so the nemesis stream advances the same way for every fault.
func (s *Sim) inject(f Fault) {
	d := durn(s.nemR, 200*time.Millisecond, 3*time.Second)
	faults[f].inject(s, f, d)
}

func (s *Sim) pick() *node { return s.nodes[s.nemR.IntN(len(s.nodes))] }

// --- fault windows ---

type window struct {
	fw   checker.FaultWindow
	done bool
	end  func()
}

// openWindow records a fault window ending after d with end.
func (s *Sim) openWindow(kind, detail string, d time.Duration, end func()) {
	s.w.fault(kind, "%s for %v", detail, d)
	win := &window{fw: checker.FaultWindow{Start: s.w.now, End: s.w.now + int64(d), Kind: kind, Detail: detail}, end: end}
	s.windows = append(s.windows, win)
	s.w.after(d, nil, func() { s.closeWindow(win) })
}

func (s *Sim) closeWindow(win *window) {
	if win.done {
		return
	}
	win.done = true
	win.fw.End = s.w.now
	if win.end != nil {
		win.end()
	}
	s.w.record("end of %s (%s)", win.fw.Kind, win.fw.Detail)
}

func (s *Sim) openWindows() int {
	k := 0
	for _, w := range s.windows {
		if !w.done {
			k++
		}
	}
	return k
}

// --- network faults ---

func (s *Sim) injectPartition(f Fault, d time.Duration) {
	a, b := s.pick(), s.pick()
	if a == b {
		return
	}
	oneway := f == FaultPartitionOneway
	s.cutLink(a.id, b.id, 1)
	if !oneway {
		s.cutLink(b.id, a.id, 1)
	}
	s.openWindow(f.String(), fmt.Sprintf("n%d -/- n%d", a.id, b.id), d, func() {
		s.cutLink(a.id, b.id, -1)
		if !oneway {
			s.cutLink(b.id, a.id, -1)
		}
	})
}

// injectIsolate cuts a node (FaultIsolateNode) or a DC (FaultIsolateDC)
// off from the rest.
func (s *Sim) injectIsolate(f Fault, d time.Duration) {
	r := s.nemR
	var in []*node
	if f == FaultIsolateNode {
		in = []*node{s.pick()}
	} else {
		if s.cfg.DCs < 2 {
			return
		}
		in = s.nodesIn(r.IntN(s.cfg.DCs))
	}
	// Half the time clients still reach the cut-off servers (only the
	// replication network is partitioned): a deposed leader keeps
	// serving them until it notices.
	clients := r.IntN(2) == 0
	apply := func(delta int) {
		for _, a := range in {
			if clients {
				s.clientCut[a.id] += delta
			}
			for _, b := range s.nodes {
				if !slices.Contains(in, b) {
					s.cutLink(a.id, b.id, delta)
					s.cutLink(b.id, a.id, delta)
				}
			}
		}
	}
	apply(1)
	s.openWindow(f.String(), fmt.Sprintf("%s cut off (clients too: %v)", names(in), clients), d, func() { apply(-1) })
}

// injectIsolateLeader cuts a leader off from its peers but not from its
// clients: until it notices, it must not serve what a new leader may have
// overwritten (read fences).
func (s *Sim) injectIsolateLeader(f Fault, d time.Duration) {
	r := s.nemR
	g := s.groups[r.IntN(len(s.groups))]
	l := s.leader(g)
	if l == nil {
		return
	}
	// Its clock runs 5-20x slow meanwhile (a starved timer, a paused
	// VM's clock catching up): raft's own timeouts (CheckQuorum) take
	// that much longer to depose it, and only a read fence stands
	// between its clients and a stale read.
	slow := 5 + r.IntN(16)
	apply := func(delta int) {
		for _, b := range s.nodes {
			if b != l {
				s.cutLink(l.id, b.id, delta)
				s.cutLink(b.id, l.id, delta)
			}
		}
	}
	apply(1)
	l.slowClock = slow
	s.openWindow(f.String(), fmt.Sprintf("n%d (leader of g%d) cut off from its peers, not from clients; its clock %dx slow", l.id, g, slow), d, func() {
		apply(-1)
		l.slowClock = 0
	})
}

func (s *Sim) injectClog(f Fault, d time.Duration) {
	a, b := s.pick(), s.pick()
	if a == b {
		return
	}
	k := [2]uint64{a.id, b.id}
	if s.clog[k] > 0 {
		return
	}
	s.clog[k] = durn(s.nemR, 50*time.Millisecond, 500*time.Millisecond)
	s.openWindow(f.String(), fmt.Sprintf("n%d -> n%d +%v", a.id, b.id, s.clog[k]), d, func() { delete(s.clog, k) })
}

// --- process faults ---

// injectStop stops a node (FaultKill, FaultPowerLoss) or a DC
// (FaultPowerLossDC) and restarts it when the window ends.
func (s *Sim) injectStop(f Fault, d time.Duration) {
	in := []*node{s.pick()}
	if f == FaultPowerLossDC {
		in = s.nodesIn(s.nemR.IntN(s.cfg.DCs))
	}
	var killed []*node
	for _, n := range in {
		if !n.down {
			n.stop(f != FaultKill)
			killed = append(killed, n)
		}
	}
	if len(killed) == 0 {
		return
	}
	s.openWindow(f.String(), names(killed)+" down", d, func() {
		for _, n := range killed {
			s.restart(n)
		}
	})
}

func (s *Sim) injectPause(f Fault, d time.Duration) {
	n := s.pick()
	if n.down || n.paused {
		return
	}
	n.paused = true
	s.openWindow(f.String(), fmt.Sprintf("n%d paused", n.id), d, func() { s.resume(n) })
}

// powerLossSoon cuts n's power within 2 ms (BUGGIFY, right after it
// promised raft something) and restarts it later.
func (s *Sim) powerLossSoon(n *node, why string) {
	r := s.nemR
	s.w.after(durn(n.crashR, 0, 2*time.Millisecond), nil, func() {
		if n.down || s.liveness {
			return
		}
		n.stop(true)
		s.openWindow(FaultPowerLoss.String(), fmt.Sprintf("n%d down right after it %s", n.id, why), durn(r, 100*time.Millisecond, time.Second), func() { s.restart(n) })
	})
}

// --- disk faults ---

func (s *Sim) injectWipeDisk(_ Fault, d time.Duration) {
	n := s.pick()
	if s.replacing != nil || s.cfg.BitFlips || s.cp != nil || n.down || !s.survivesLoss(n) {
		return
	}
	for g, id := range s.demoted {
		if id == n.id {
			delete(s.demoted, g) // the replacement promotes it
		}
	}
	s.wipe(n, d)
}

// injectDiskEIO fails a node's next fsync, or half the time its next
// write, with EIO.
func (s *Sim) injectDiskEIO(f Fault, d time.Duration) {
	n := s.pick()
	eio, what := vfs.Faults{FailSyncs: 1}, "fsync"
	if s.nemR.IntN(2) == 0 {
		eio, what = vfs.Faults{FailWrites: 1}, "write"
	}
	n.fs.SetFaults(eio)
	s.openWindow(f.String(), fmt.Sprintf("n%d next %s fails with EIO", n.id, what), d, func() { n.fs.SetFaults(vfs.Faults{}) })
}

// injectDiskFull fills a node's disk to a few KiB of room. Half the time
// it stays full (across restarts, until the heal; retention frees some of
// it), else an operator adds space when the window ends.
func (s *Sim) injectDiskFull(f Fault, d time.Duration) {
	r := s.nemR
	n := s.pick()
	n.disk.SetCapacity(memUsed(n.disk, "/") + r.Int64N(64<<10))
	if r.IntN(2) == 0 {
		s.openWindow(f.String(), fmt.Sprintf("n%d disk full until the heal", n.id), d, nil)
		return
	}
	s.openWindow(f.String(), fmt.Sprintf("n%d disk full", n.id), d, func() { n.disk.SetCapacity(0) })
}

func (s *Sim) injectDiskSlow(f Fault, d time.Duration) {
	n := s.pick()
	n.slowTill = s.w.now + int64(d)
	s.openWindow(f.String(), fmt.Sprintf("n%d fsyncs slow", n.id), d, nil)
}

// injectCorruption flips a bit in (FaultBitflip) or misdirects the next
// write of (FaultMisdirect) a victim that is not yet quarantined.
func (s *Sim) injectCorruption(f Fault, _ time.Duration) {
	var vs []*node
	for _, n := range s.nodes {
		if n.victim && !n.quarantined {
			vs = append(vs, n)
		}
	}
	if len(vs) == 0 {
		return
	}
	n := vs[s.corruptR.IntN(len(vs))]
	if f == FaultBitflip {
		s.flipBit(n, map[bool]string{true: "stopped", false: "live"}[n.down])
		return
	}
	shift := int64(8 * (1 + s.corruptR.IntN(512)))
	if s.corruptR.IntN(2) == 0 {
		shift = -shift
	}
	n.fs.Misdirect(n.dir()+"/", shift)
	n.corrupted = true
	s.corruptionWindow(f.String(), fmt.Sprintf("n%d next write lands %+d bytes off", n.id, shift))
}

// --- operator actions ---

func (s *Sim) injectLeaderTransfer(f Fault, _ time.Duration) {
	g := s.groups[s.nemR.IntN(len(s.groups))]
	l := s.leader(g)
	to := s.pick()
	if l == nil || to == l {
		return
	}
	s.w.fault(f.String(), "g%d n%d -> n%d", g, l.id, to.id)
	s.w.runIn(l, func() {
		l.rn.TransferLeader(g, to.id)
		l.flush()
	})
}

// injectMembership demotes a voter to learner, or promotes back the one
// it demoted; one membership operation at a time.
func (s *Sim) injectMembership(f Fault, _ time.Duration) {
	if s.replacing != nil {
		return
	}
	r := s.nemR
	g := s.groups[r.IntN(s.cfg.Streams)] // the static groups (moves change the others')
	l := s.leader(g)
	if l == nil {
		return
	}
	if lr, ok := s.demoted[g]; ok {
		s.w.fault(f.String(), "g%d promote n%d back", g, lr)
		s.changeMember(l, g, lr, raftpb.ConfChangeAddNode)
		return
	}
	st, _ := l.rn.Status(g)
	if len(st.Learners) > 0 || len(st.Voters) < 3 {
		return
	}
	v := st.Voters[r.IntN(len(st.Voters))]
	if s.cfg.BitFlips {
		// Only corruption victims are demoted: with a victim stopped
		// for good, a demoted healthy voter could leave no quorum.
		var vs []uint64
		for _, id := range st.Voters {
			if n := s.node(id); n != nil && n.victim {
				vs = append(vs, id)
			}
		}
		if len(vs) == 0 {
			return
		}
		v = vs[s.corruptR.IntN(len(vs))]
	}
	s.w.fault(f.String(), "g%d demote n%d to learner", g, v)
	s.demoted[g] = v
	s.changeMember(l, g, v, raftpb.ConfChangeAddLearnerNode)
}

// injectRetention is an operator's retention request (POST
// /streams/s2/retain) at 3/4 of the high watermark, just below it, at it,
// or above it: those above must be refused, the others accepted.
func (s *Sim) injectRetention(f Fault, _ time.Duration) {
	if len(s.groups) < 2 {
		return
	}
	r := s.nemR
	g := s.groups[1] // only the second stream: the first keeps a complete final read
	l := s.leader(g)
	if l == nil || !l.readable(g) || l.grp[g].HighWatermark == 0 {
		return
	}
	hwm := l.grp[g].HighWatermark
	before := []int64{hwm * 3 / 4, hwm - 1, hwm, hwm + 1, hwm + 1 + r.Int64N(200)}[r.IntN(5)]
	s.w.fault(f.String(), "g%d delete before %d (n%d hwm %d)", g, before, l.id, hwm)
	s.w.runIn(l, func() {
		l.backend.Retain(s.streams[1], before, func(err error) { s.retained(l, g, before, hwm, err) })
		l.flush()
	})
}

// nodesIn lists the nodes of DC dc.
func (s *Sim) nodesIn(dc int) []*node {
	var in []*node
	for _, n := range s.nodes {
		if n.dc == dc {
			in = append(in, n)
		}
	}
	return in
}

func names(ns []*node) string {
	var b []string
	for _, n := range ns {
		b = append(b, fmt.Sprintf("n%d", n.id))
	}
	return strings.Join(b, ",")
}
