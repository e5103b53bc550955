package configserver

import (
	"cmp"
	"fmt"
	"slices"
)

// Candidate is a server placement may choose, with its current load.
type Candidate struct {
	Server
	Replicas int  // replicas of streams it holds
	Leaders  int  // streams whose preferred leader it is
	DiskLow  bool // its data dir is short of space (its last report)
}

// Place chooses rf servers for a new stream, the preferred leader first:
//
//   - only active (not draining) servers that are up and not short of
//     disk space;
//   - spread over DCs round-robin, the preferred DC first (three DCs and
//     three replicas: one replica per DC), then the other DCs by name;
//   - within a DC, a rack not used yet when there is one;
//   - the least loaded first (replicas; for the preferred leader, leaders
//     first), ties by id, so equal clusters place alike.
//
// It is deterministic: the same candidates give the same placement.
func Place(cands []Candidate, rf int, preferredDC string) ([]uint64, error) {
	var usable []Candidate
	low := 0
	for _, c := range cands {
		switch {
		case c.State != ServerActive:
		case c.DiskLow:
			low++
		default:
			usable = append(usable, c)
		}
	}
	if len(usable) < rf {
		return nil, fmt.Errorf("%w: %d replicas need %d active servers that are up with disk space, there are %d (%d short of disk space)",
			ErrPlacement, rf, rf, len(usable), low)
	}
	dcs := dcOrder(usable, preferredDC)
	if preferredDC != "" && dcs[0] != preferredDC {
		return nil, fmt.Errorf("%w: no active server that is up in preferred dc %q", ErrPlacement, preferredDC)
	}
	var picked []uint64
	racks := map[string]bool{}
	for len(picked) < rf {
		for _, dc := range dcs {
			if len(picked) == rf {
				break
			}
			c, ok := pick(usable, dc, picked, racks, len(picked) == 0)
			if !ok {
				continue
			}
			picked = append(picked, c.ID)
			racks[rackKey(c.Server)] = true
		}
	}
	return picked, nil
}

// dcOrder is the DCs of the candidates, preferred first, then by name.
func dcOrder(cands []Candidate, preferred string) []string {
	var dcs []string
	for _, c := range cands {
		if !slices.Contains(dcs, c.DC) {
			dcs = append(dcs, c.DC)
		}
	}
	slices.SortFunc(dcs, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == preferred:
			return -1
		case b == preferred:
			return 1
		}
		return cmp.Compare(a, b)
	})
	return dcs
}

// pick is the best server of dc not picked yet: an unused rack first, then
// the least loaded.
func pick(cands []Candidate, dc string, picked []uint64, racks map[string]bool, leader bool) (Candidate, bool) {
	var best Candidate
	found := false
	for _, c := range cands {
		if c.DC != dc || slices.Contains(picked, c.ID) {
			continue
		}
		if !found || better(c, best, racks, leader) {
			best, found = c, true
		}
	}
	return best, found
}

func better(a, b Candidate, racks map[string]bool, leader bool) bool {
	if ra, rb := racks[rackKey(a.Server)], racks[rackKey(b.Server)]; ra != rb {
		return !ra
	}
	if leader && a.Leaders != b.Leaders {
		return a.Leaders < b.Leaders
	}
	if a.Replicas != b.Replicas {
		return a.Replicas < b.Replicas
	}
	return a.ID < b.ID
}

// rackKey names a rack; a server without a rack is a rack of its own.
func rackKey(s Server) string {
	if s.Rack == "" {
		return fmt.Sprintf("%s/#%d", s.DC, s.ID)
	}
	return s.DC + "/" + s.Rack
}

// Load counts each server's replicas and preferred leaderships among
// streams (deleted ones still stopping included: their data is there).
func Load(servers []Server, streams []Stream) []Candidate {
	out := make([]Candidate, 0, len(servers))
	for _, s := range servers {
		c := Candidate{Server: s}
		for _, st := range streams {
			if slices.Contains(st.Replicas, s.ID) {
				c.Replicas++
			}
			if len(st.Replicas) > 0 && st.Replicas[0] == s.ID {
				c.Leaders++
			}
		}
		out = append(out, c)
	}
	return out
}
