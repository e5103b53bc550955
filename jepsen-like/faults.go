package campaign

import (
	"fmt"
	"slices"
	"strings"
)

// faultWindow is one fault as it was in force: from its injection to its
// undoing (End -1 while it lasts), on the history's clock.
type faultWindow struct {
	Key    string `json:"-"` // what undoes it: "node:N" (a restart, a resume) or "partition" (a heal)
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Start  int64  `json:"start_ns"`
	End    int64  `json:"end_ns"`
}

func nodeKey(id uint64) string { return fmt.Sprintf("node:%d", id) }

// openFault records a fault injected now.
func (r *runner) openFault(key, kind, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, faultWindow{Key: key, Kind: kind, Detail: detail, Start: r.now(), End: -1})
}

// closeFaults ends the faults in force that key undoes.
func (r *runner) closeFaults(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for i := range r.faults {
		if f := &r.faults[i]; f.End < 0 && f.Key == key {
			f.End = now
		}
	}
}

// currentFaults describes the faults in force.
func (r *runner) currentFaults() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cur []string
	for _, f := range r.faults {
		if f.End < 0 {
			cur = append(cur, f.Kind+" "+f.Detail)
		}
	}
	if len(cur) == 0 {
		return "none"
	}
	return strings.Join(cur, ", ")
}

// faultWindows are the faults so far, those still in force ending at end.
func (r *runner) faultWindows(end int64) []faultWindow {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.faults)
	for i := range out {
		if out[i].End < 0 {
			out[i].End = end
		}
	}
	return out
}

// Client implementations of the workload, by connection.
const (
	clientFranz = "franz-go"
	clientKcat  = "kcat"
)

func (r *runner) setClient(conn int, impl string) {
	r.mu.Lock()
	r.clients[conn] = impl
	r.mu.Unlock()
}

func (r *runner) clientOf(conn int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[conn]; ok {
		return c
	}
	return clientFranz
}

// dcOf is the DC of a node: its topology's, else (the loopback) node i is
// in DC ((i-1) mod dcs) + 1.
func (r *runner) dcOf(id uint64) int {
	if r.net != nil {
		return r.net.DCOf(id)
	}
	if r.dcs <= 1 {
		return 1
	}
	return int((id-1)%uint64(r.dcs)) + 1
}
