package campaign

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// Config servers in campaigns: start-cluster config-servers=3
// preferred=dc1,dc2,dc3 [balance-after=MS] runs the control plane as
// production does — three `vdl configserver` processes (in namespaces of
// their own when net=netns, config server k in DC ((k-1) mod dcs) + 1),
// the servers labelled with their DC (dcN) and registering with them, the
// streams created through them with stream i's preferred DC the i-th of
// preferred=. The nemesis's cs-kill kills -9 the config servers' leader
// (restarted at the next turn), cs-partition cuts the leader off from
// every server and config server (netns), and partition-dc takes the
// DC's config server with it. The check ends with the balancer's
// liveness: once every fault is undone, every stream's leader must be back
// in its preferred DC within preferredDCBound.

// preferredDCBound bounds the balancer's return of every leader to its
// preferred DC after the last heal: the config servers' view must be fresh
// again (down_after_ms, 10 s), a leader outside its DC for balance_after_ms
// (10 s by default) before it is moved, and a server the nemesis restarted
// last caught up.
const preferredDCBound = 90 * time.Second

// controlPlane reads start-cluster's config-servers=, preferred= and
// balance-after= into the cluster's and network's options.
func (r *runner) controlPlane(cmd Command, opts *proccluster.Options, spec *NetSpec) error {
	if _, ok := cmd.Keys["config-servers"]; !ok {
		if _, ok := cmd.Keys["preferred"]; ok {
			return errors.New("preferred= needs config-servers=")
		}
		return nil
	}
	n, err := intKey(cmd, "config-servers", 0)
	if err != nil {
		return err
	}
	opts.ConfigServers, spec.ConfigServers = n, n
	if p := cmd.Keys["preferred"]; p != "" {
		opts.PreferredDCs = strings.Split(p, ",")
		r.preferred = opts.PreferredDCs
		for _, dc := range opts.PreferredDCs {
			k, err := strconv.Atoi(strings.TrimPrefix(dc, "dc"))
			if !strings.HasPrefix(dc, "dc") || err != nil || k < 1 || k > max(r.dcs, 1) {
				return fmt.Errorf("preferred=%s: %q is no DC of dc1..dc%d", p, dc, max(r.dcs, 1))
			}
		}
		if len(opts.PreferredDCs) > len(opts.Streams) {
			return fmt.Errorf("preferred=%s: more DCs than streams", p)
		}
	}
	if _, ok := cmd.Keys["balance-after"]; ok {
		if opts.BalanceAfterMillis, err = intKey(cmd, "balance-after", 0); err != nil {
			return err
		}
	}
	return nil
}

// labelDCs gives the servers their DC labels (once the network, which
// places them, is made).
func (r *runner) labelDCs(opts *proccluster.Options) {
	if opts.ConfigServers == 0 {
		return
	}
	opts.DCs = nil
	for i := range opts.Nodes {
		opts.DCs = append(opts.DCs, fmt.Sprintf("dc%d", r.dcOf(uint64(i+1))))
	}
	if r.net != nil {
		opts.ConfigServerHosts = r.net.ConfigServerHosts()
	}
}

// csName names config server id (c1, c2, ...).
func csName(id uint64) string { return fmt.Sprintf("c%d", id-100) }

// injectCS makes a config-server fault: cs-kill or cs-partition of the
// config servers' leader.
func (r *runner) injectCS(kind string) error {
	if len(r.c.ConfigServers) == 0 {
		return errors.New("no config servers (start-cluster config-servers=3)")
	}
	leader := r.c.ConfigServerLeader()
	if leader == 0 {
		return errors.New("no config server answers as the leader")
	}
	switch kind {
	case "cs-kill":
		r.c.Kill(leader)
		r.openFault(nodeKey(leader), kind, csName(leader))
	case "cs-partition":
		if r.net == nil {
			return fmt.Errorf("cs-partition needs net=netns: %w", errUnsupported)
		}
		var others []uint64
		for _, n := range r.c.Nodes {
			others = append(others, n.ID)
		}
		for _, n := range r.c.ConfigServers {
			if n.ID != leader {
				others = append(others, n.ID)
			}
		}
		if err := r.cut(cutPairs([]uint64{leader}, others, true)); err != nil {
			return err
		}
		r.openFault("partition", kind, csName(leader)+"|"+names(others))
	}
	r.active = append(r.active, activeFault{kind, leader})
	return nil
}

// undoCS restarts a killed config server.
func (r *runner) undoCS(f activeFault) error {
	if r.c.Node(f.node).Running() {
		return nil
	}
	r.c.Restart(f.node)
	r.closeFaults(nodeKey(f.node))
	return nil
}

// dcConfigServers splits the config servers by whether they are in dc.
func (r *runner) dcConfigServers(dc int) (in, out []uint64) {
	for _, n := range r.c.ConfigServers {
		if r.dcOf(n.ID) == dc {
			in = append(in, n.ID)
		} else {
			out = append(out, n.ID)
		}
	}
	return in, out
}

// preferredDCs checks the balancer's liveness: every stream with a
// preferred DC gets its leader back there within preferredDCBound.
func (r *runner) preferredDCs() (string, error) {
	want := map[string]string{}
	for i, s := range r.streams {
		if i < len(r.preferred) && r.preferred[i] != "" {
			want[s] = r.preferred[i]
		}
	}
	if len(want) == 0 {
		return "", nil
	}
	// From the last fault's end (the workload undid every fault).
	start := time.Now()
	last := r.t0
	for _, f := range r.faultWindows(r.now()) {
		if at := r.t0.Add(time.Duration(f.End)); at.After(last) {
			last = at
		}
	}
	if !last.Equal(r.t0) {
		start = last
	}
	var where []string
	for {
		where = where[:0]
		ok := true
		for _, s := range r.streams {
			dc, has := want[s]
			if !has {
				continue
			}
			leader := r.leaderOf(s)
			at := "none"
			if leader != 0 {
				at = fmt.Sprintf("dc%d", r.dcOf(leader))
			}
			where = append(where, fmt.Sprintf("%s n%d in %s (preferred %s)", s, leader, at, dc))
			ok = ok && at == dc
		}
		if ok {
			break
		}
		if time.Since(start) > preferredDCBound {
			out := fmt.Sprintf("preferred DCs: NOT every leader back within %v: %s", preferredDCBound, strings.Join(where, ", "))
			r.setLiveness(out)
			return out, errors.New(out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	out := fmt.Sprintf("preferred DCs: every leader in its preferred DC %.1f s after the last heal (bound %v): %s",
		time.Since(start).Seconds(), preferredDCBound, strings.Join(where, ", "))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b, err := r.c.ConfigClient().Balancer(ctx); err == nil {
		out += fmt.Sprintf("; the config servers' leader's balancer made %d transfers (%d failed)", b.Transfers, b.Failures)
	}
	r.setLiveness(out)
	return out, nil
}

func (r *runner) setLiveness(s string) {
	r.mu.Lock()
	r.liveness = s
	r.mu.Unlock()
}

// leaderOf is the running server that reports itself the stream's leader
// (0: none).
func (r *runner) leaderOf(stream string) uint64 {
	for _, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := r.c.StreamStatus(n.ID, stream)
		if err == nil && st.Role == "StateLeader" {
			return n.ID
		}
	}
	return 0
}
