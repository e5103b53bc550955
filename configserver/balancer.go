package configserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/vdl-project/vdl/internal/pki"
)

// The balancer, on the leader, once a second: a stream whose leader has
// been outside its preferred DC for BalanceAfterMs gets a leader transfer
// to a caught-up replica there that is up. Among the replicas of the
// leader's DC (every replica without a preferred DC), a busy stream's
// leadership (its high watermark moved within BusyFor) moves from a
// server leading two more busy streams than another; then leadership
// moves from a server leading two more streams than another, an idle
// stream's first: moving a busy stream's leader stalls its producers, and
// the catalog's first streams by name were moved again and again while
// thousands were created. It acts only on a fresh view (a new leader
// first waits until it heard every server), at most MaxTransfersPerSec
// transfers a second, one per stream per BalanceAfterMs; what it did and
// what it could not do, and why, is GET /v1/balancer (vdlctl balancer
// status).

// BalancerStatus is GET /v1/balancer.
type BalancerStatus struct {
	View      string         `json:"view"` // "fresh", or why the balancer waits
	Pending   []BalancerItem `json:"pending"`
	Refused   []BalancerItem `json:"refused"`
	Done      []BalancerItem `json:"done"` // the newest last
	Transfers uint64         `json:"transfers"`
	Failures  uint64         `json:"failures"`
}

// BalancerItem is one stream the balancer looked at.
type BalancerItem struct {
	Stream string `json:"stream"`
	Leader uint64 `json:"leader"`
	To     uint64 `json:"to,omitempty"`
	At     int64  `json:"at_ms"` // since when (pending) or when
	Reason string `json:"reason"`
}

// balancer is the leader's soft balancing state.
type balancer struct {
	mu        sync.Mutex
	outside   map[string]time.Time // stream -> since when its leader is outside its preferred DC
	writes    map[uint64]WriteSeen // group -> when it was last written
	last      map[string]time.Time // stream -> its last transfer
	pending   []BalancerItem
	refused   []BalancerItem
	done      []BalancerItem
	transfers uint64
	failures  uint64
	view      string
}

const keepDone = 50

func newBalancer() *balancer {
	return &balancer{outside: map[string]time.Time{}, last: map[string]time.Time{}, writes: map[uint64]WriteSeen{}}
}

func (b *balancer) status() BalancerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BalancerStatus{View: b.view, Pending: slices.Clone(b.pending), Refused: slices.Clone(b.refused),
		Done: slices.Clone(b.done), Transfers: b.transfers, Failures: b.failures}
}

// transfer is one leader transfer the balancer decided.
type transfer struct {
	stream     Stream
	from, to   uint64
	reason     string
	fromServer Server
}

// balance runs one round of the balancer.
func (s *Service) balance(ctx context.Context, now time.Time) {
	s.soft.mu.Lock()
	fresh, why := s.soft.fresh(now, s.downAfter())
	s.soft.mu.Unlock()
	b := s.bal
	if !fresh {
		b.mu.Lock()
		b.view = why
		b.mu.Unlock()
		return
	}
	plan := s.planTransfers(now)
	for i, t := range plan {
		if i >= s.cfg.MaxTransfersPerSec {
			break
		}
		fpBeforeTransfer()
		err := s.transferLeader(ctx, t)
		b.mu.Lock()
		item := BalancerItem{Stream: t.stream.Name, Leader: t.from, To: t.to, At: now.UnixMilli(), Reason: t.reason}
		if err != nil {
			b.failures++
			item.Reason = fmt.Sprintf("%s: transfer failed: %v", t.reason, err)
			b.refused = append(b.refused, item)
		} else {
			b.transfers++
			b.done = append(b.done, item)
			if len(b.done) > keepDone {
				b.done = b.done[len(b.done)-keepDone:]
			}
		}
		b.last[t.stream.Name] = now
		b.mu.Unlock()
	}
}

// planTransfers decides this round's transfers and records what waits and
// what cannot be done.
func (s *Service) planTransfers(now time.Time) []transfer {
	v := BalanceView{Servers: map[uint64]Server{}, Streams: s.state.Streams(), Up: map[uint64]bool{}}
	for _, srv := range s.state.Servers() {
		v.Servers[srv.ID] = srv
	}
	s.soft.mu.Lock()
	v.Leaders = s.leadersLocked()
	v.Reports = make(map[uint64]GroupReport, len(v.Leaders))
	for id, h := range s.soft.reports {
		health, _ := s.soft.health(id, now, s.downAfter())
		v.Up[id] = health == "up"
		for _, g := range h.report.Groups {
			if g.Role == roleLeader && v.Leaders[g.Group] == id {
				v.Reports[g.Group] = g
			}
		}
	}
	s.soft.mu.Unlock()
	b := s.bal
	b.mu.Lock()
	defer b.mu.Unlock()
	b.view = "fresh"
	mem := BalanceMemory{Outside: b.outside, Last: b.last, Writes: b.writes}
	plan, pending, refused := PlanTransfers(v, &mem, now, time.Duration(s.cfg.BalanceAfterMs)*time.Millisecond)
	b.pending, b.refused = pending, refused
	var out []transfer
	for _, t := range plan {
		out = append(out, transfer{stream: t.Stream, from: t.From, to: t.To, reason: t.Reason, fromServer: v.Servers[t.From]})
	}
	return out
}

// BalanceView is what the balancer decides from: the catalog, each
// group's leader and that leader's last report, and which servers are up.
type BalanceView struct {
	Servers map[uint64]Server
	Streams []Stream
	Leaders map[uint64]uint64      // group -> its reported leader
	Reports map[uint64]GroupReport // group -> its leader's report
	Up      map[uint64]bool
}

// BalanceMemory is what the balancer remembers between rounds (soft, the
// leader's only): since when each stream's leader is outside its preferred
// DC, each stream's last transfer, when each group was last written (both
// kept by PlanTransfers; nil: made on first use), and when busy streams'
// leaders were last spread (PlanTransfers keeps it).
type BalanceMemory struct {
	Outside    map[string]time.Time
	Last       map[string]time.Time
	Writes     map[uint64]WriteSeen
	BusySpread time.Time
}

// WriteSeen is a stream's high watermark as the balancer last saw it, and
// when it last moved (zero: never seen moving). Not the commit, which
// moves with every election: then every stream created or transferred
// looked busy for BusyFor, and the balancer moved the streams really
// written, idle a while, before them.
type WriteSeen struct {
	HighWatermark int64
	At            time.Time
}

// BusyFor is how long after it was last written a stream counts as busy
// for the balancer: its leader is moved to even the counts only if no idle
// stream can be.
const BusyFor = 30 * time.Second

// Transfer is one leader transfer the balancer decided.
type Transfer struct {
	Stream   Stream
	From, To uint64
	Reason   string
}

// PlanTransfers decides a round's leader transfers (the preferred DC
// first, then even leader counts within a DC), and lists what waits and
// what cannot be done, and why. It is a pure function of v, mem and now
// (it updates mem's Outside, Writes and BusySpread; the caller records
// Last when it transfers),
// deterministic for the same input: the config servers and the simulator
// run it alike.
func PlanTransfers(v BalanceView, mem *BalanceMemory, now time.Time, after time.Duration) (plan []Transfer, pending, refused []BalancerItem) {
	servers := v.Servers
	e := newEvener(v, mem, noteWrites(v, mem, now))
	// The streams whose leader may move to even the counts: pointers into
	// v.Streams (copied, 10,000 streams' entries grew a slice of megabytes
	// every round).
	evens := make([]*Stream, 0, len(v.Streams))
	for i := range v.Streams {
		st := &v.Streams[i]
		l, ok := v.Leaders[st.Group]
		if st.State != StreamActive || !ok {
			delete(mem.Outside, st.Name)
			continue
		}
		item := BalancerItem{Stream: st.Name, Leader: l}
		if st.PreferredDC != "" && servers[l].DC != st.PreferredDC {
			since, seen := mem.Outside[st.Name]
			if !seen {
				since = now
				mem.Outside[st.Name] = now
			}
			item.At = since.UnixMilli()
			if now.Sub(since) < after || now.Sub(mem.Last[st.Name]) < after {
				item.Reason = fmt.Sprintf("leader in dc %q, outside preferred dc %q: waiting %v before a transfer", servers[l].DC, st.PreferredDC, after)
				pending = append(pending, item)
				continue
			}
			to := pickLeader(st.Replicas, func(id uint64) bool { return servers[id].DC == st.PreferredDC && e.caughtUp(st.Group, id) }, e.count)
			if to == 0 {
				item.Reason = fmt.Sprintf("no replica in preferred dc %q is up and caught up", st.PreferredDC)
				refused = append(refused, item)
				continue
			}
			plan = append(plan, Transfer{Stream: *st, From: l, To: to, Reason: fmt.Sprintf("back to preferred dc %q", st.PreferredDC)})
			e.move(st.Group, l, to)
			continue
		}
		delete(mem.Outside, st.Name)
		if now.Sub(mem.Last[st.Name]) < after {
			continue
		}
		evens = append(evens, st)
	}
	// Busy streams' leaders are spread in one round, then not again for
	// after: the leaders in the view are the servers' reports, which show
	// a transfer a report later, and acting on the view before that moved
	// more leaders than needed, back and forth.
	if now.Sub(mem.BusySpread) >= after {
		if spread := e.evenBusy(evens); len(spread) > 0 {
			plan = append(plan, spread...)
			mem.BusySpread = now
		}
	}
	plan = append(plan, e.evenAll(evens)...)
	return plan, pending, refused
}

// evener evens leader counts within each DC among the streams whose
// leader may move this round: first the busy streams' (a server leading
// most of the written streams does most of the work: creating thousands of
// idle streams left ten written ones' leaders at 1/5/4 and 0/10/0 across
// three servers, although the counts were even), then all of them, idle
// streams first. count and busyCount follow the transfers planned.
type evener struct {
	servers   map[uint64]Server
	leaders   map[uint64]uint64
	reports   map[uint64]GroupReport
	up        map[uint64]bool
	busy      map[uint64]bool
	writes    map[uint64]WriteSeen // when each group was last written
	count     map[uint64]int       // leaders per server
	busyCount map[uint64]int       // busy streams' leaders per server
	moved     map[uint64]bool      // groups with a transfer planned this round
}

func newEvener(v BalanceView, mem *BalanceMemory, busy map[uint64]bool) *evener {
	e := &evener{servers: v.Servers, leaders: v.Leaders, reports: v.Reports, up: v.Up, busy: busy, writes: mem.Writes,
		count: map[uint64]int{}, busyCount: map[uint64]int{}, moved: map[uint64]bool{}}
	for g, l := range v.Leaders {
		e.count[l]++
		if busy[g] {
			e.busyCount[l]++
		}
	}
	return e
}

// evenBusy moves a busy stream's leader from a server leading two more
// busy streams than a caught-up replica in its DC, to the replica leading
// the fewest busy streams (then the fewest streams).
func (e *evener) evenBusy(evens []*Stream) (plan []Transfer) {
	for _, st := range evens {
		if !e.busy[st.Group] {
			continue
		}
		l := e.leaders[st.Group]
		var to uint64
		for _, id := range st.Replicas {
			if id == l || e.servers[id].DC != e.servers[l].DC || !e.caughtUp(st.Group, id) {
				continue
			}
			if to == 0 || e.busyCount[id] < e.busyCount[to] || (e.busyCount[id] == e.busyCount[to] && e.count[id] < e.count[to]) {
				to = id
			}
		}
		if to != 0 && e.busyCount[l]-e.busyCount[to] >= 2 {
			plan = append(plan, Transfer{Stream: *st, From: l, To: to,
				Reason: fmt.Sprintf("even busy streams' leaders in dc %q: server %d leads %d, server %d %d", e.servers[l].DC, l, e.busyCount[l], to, e.busyCount[to])})
			e.move(st.Group, l, to)
		}
	}
	return plan
}

// evenAll moves a leader from a server leading two more streams than a
// caught-up replica in its DC, idle streams first: moving a busy stream's
// leader stalls its producers. Among the idle ones the least recently
// written go first (never written, then in the catalog's order): by the
// catalog's order alone, streams written a minute ago and idle since were
// moved again and again while thousands of idle ones were created (the 10
// hot streams of BenchmarkStreams, first by name: 102 leader changes). A
// busy stream moves only to a server leading fewer busy streams (not
// undoing evenBusy).
//
// When no two servers of a DC lead two or more streams apart it can move
// nothing, and it returns before ordering the streams: the order took most
// of a round at 10,000 streams, every second, with the counts even.
func (e *evener) evenAll(evens []*Stream) (plan []Transfer) {
	if !e.uneven() {
		return nil
	}
	slices.SortStableFunc(evens, func(a, b *Stream) int {
		if c := cmpBool(e.busy[a.Group], e.busy[b.Group]); c != 0 {
			return c
		}
		return e.writes[a.Group].At.Compare(e.writes[b.Group].At)
	})
	for _, st := range evens {
		l := e.leaders[st.Group]
		if e.moved[st.Group] {
			continue
		}
		to := pickLeader(st.Replicas, func(id uint64) bool {
			return id != l && e.servers[id].DC == e.servers[l].DC && e.caughtUp(st.Group, id) &&
				(!e.busy[st.Group] || e.busyCount[id] < e.busyCount[l])
		}, e.count)
		if to != 0 && e.count[l]-e.count[to] >= 2 {
			plan = append(plan, Transfer{Stream: *st, From: l, To: to,
				Reason: fmt.Sprintf("even leaders in dc %q: server %d leads %d, server %d %d", e.servers[l].DC, l, e.count[l], to, e.count[to])})
			e.move(st.Group, l, to)
		}
	}
	return plan
}

// uneven reports whether two servers of one DC lead two or more streams
// apart: otherwise evenAll has nothing to move. It looks at every server
// that may be either end of a transfer: those leading (count), those that
// may take over (a caught-up replica is up), and the registered ones.
func (e *evener) uneven() bool {
	lo, hi := map[string]int{}, map[string]int{}
	note := func(id uint64) {
		dc, c := e.servers[id].DC, e.count[id]
		if l, ok := lo[dc]; !ok || c < l {
			lo[dc] = c
		}
		if h, ok := hi[dc]; !ok || c > h {
			hi[dc] = c
		}
	}
	for id := range e.servers {
		note(id)
	}
	for id := range e.count {
		note(id)
	}
	for id := range e.up {
		note(id)
	}
	for dc, h := range hi {
		if h-lo[dc] >= 2 {
			return true
		}
	}
	return false
}

// move counts a planned transfer of group's leader from one server to
// another; the group is not moved again this round.
func (e *evener) move(group, from, to uint64) {
	e.count[from]--
	e.count[to]++
	if e.busy[group] {
		e.busyCount[from]--
		e.busyCount[to]++
	}
	e.moved[group] = true
}

// caughtUp says replica id is up and has everything its group's leader
// reported committed.
func (e *evener) caughtUp(group, id uint64) bool {
	rep := e.reports[group]
	for _, f := range rep.Followers {
		if f.ID == id {
			return f.Active && f.Match >= rep.Commit && e.up[id]
		}
	}
	return false
}

// noteWrites records in mem when each active stream was last written,
// from its leader's report, forgets the others, and returns the streams
// busy at now (moved within BusyFor).
func noteWrites(v BalanceView, mem *BalanceMemory, now time.Time) map[uint64]bool {
	if mem.Writes == nil {
		mem.Writes = map[uint64]WriteSeen{}
	}
	active := make(map[uint64]bool, len(v.Streams))
	busy := map[uint64]bool{}
	for _, st := range v.Streams {
		rep, ok := v.Reports[st.Group]
		if st.State != StreamActive || !ok {
			continue
		}
		active[st.Group] = true
		w, seen := mem.Writes[st.Group]
		switch {
		case !seen:
			w = WriteSeen{HighWatermark: rep.HighWatermark}
		case rep.HighWatermark != w.HighWatermark:
			w = WriteSeen{HighWatermark: rep.HighWatermark, At: now}
		}
		mem.Writes[st.Group] = w
		if !w.At.IsZero() && now.Sub(w.At) < BusyFor {
			busy[st.Group] = true
		}
	}
	for g := range mem.Writes {
		if !active[g] {
			delete(mem.Writes, g)
		}
	}
	return busy
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// pickLeader is the replica that may lead (ok) leading the fewest streams.
func pickLeader(replicas []uint64, ok func(uint64) bool, count map[uint64]int) uint64 {
	var best uint64
	for _, id := range replicas {
		if ok(id) && (best == 0 || count[id] < count[best]) {
			best = id
		}
	}
	return best
}

// transferLeader asks the stream's leader to hand leadership to t.to.
func (s *Service) transferLeader(ctx context.Context, t transfer) error {
	u := fmt.Sprintf("%s://%s/streams/%s/transfer-leader?to=%d", s.serverScheme(), t.fromServer.Admin, url.PathEscape(t.stream.Name), t.to)
	return s.serverPost(ctx, u)
}

func (s *Service) serverScheme() string {
	if s.pool != nil {
		return "https"
	}
	return "http"
}

// serverPost posts to a server's admin API as the config servers.
func (s *Service) serverPost(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	return s.do(req)
}

// do sends a request to a server's admin API; an error status is an error.
func (s *Service) do(req *http.Request) error {
	resp, err := s.serverHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// newServerHTTP is the config servers' client of the servers' admin API:
// their certificate (servers let config servers change leadership and
// membership), checking the server's; or the token on plain text.
func (s *Service) newServerHTTP() *http.Client {
	hc := &http.Client{Timeout: 10 * time.Second}
	if s.pool != nil {
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{s.cert}, RootCAs: s.pool,
			MinVersion: tls.VersionTLS12, VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no certificate")
				}
				if _, ok := pki.NodeID(cs.PeerCertificates[0]); !ok {
					return fmt.Errorf("%v is not a server's certificate", cs.PeerCertificates[0].DNSNames)
				}
				return nil
			}}}
	} else if s.token != "" {
		hc.Transport = pki.Bearer{Token: s.token, Next: http.DefaultTransport}
	}
	return hc
}
