package checker

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
)

// ReplicaRecord is one committed entry of a replica's log.
type ReplicaRecord struct {
	Offset int64  `json:"offset"`
	Bytes  []byte `json:"bytes"`
}

// ReplicaHashes is a replica's committed prefix as one hash per offset, from Start.
type ReplicaHashes struct {
	Start  int64    `json:"start"`
	Hashes []uint64 `json:"hashes"`
}

// ConvergenceResult says whether replicas agree on their committed entries.
type ConvergenceResult struct {
	OK       bool  `json:"ok"`
	Replicas int   `json:"replicas"`
	Compared int64 `json:"compared"` // offsets held by at least two replicas
	// CommonEnd is the end of the prefix committed on every replica (min end).
	CommonEnd int64 `json:"common_end"`
	// FirstDiff is the lowest offset where two replicas hold different entries, -1 if none.
	FirstDiff int64 `json:"first_diff"`
	// Groups are the replicas at FirstDiff grouped by identical content.
	Groups [][]string `json:"groups,omitempty"`
	Errors []string   `json:"errors,omitempty"`
}

// CheckConvergence checks that replicas' committed entries are byte-identical: every offset
// committed on two replicas must hold the same bytes (Raft's log matching for committed
// entries), which includes the common committed prefix. Records must be contiguous.
func CheckConvergence(replicas map[string][]ReplicaRecord) ConvergenceResult {
	logs := map[string]digestLog{}
	var errs []string
	for _, name := range sortedKeys(replicas) {
		recs := replicas[name]
		var l digestLog
		for i, r := range recs {
			if i == 0 {
				l.start = r.Offset
			} else if r.Offset != l.start+int64(i) {
				errs = append(errs, fmt.Sprintf("replica %s: offset %d follows %d", name, r.Offset, recs[i-1].Offset))
				break
			}
			l.sums = append(l.sums, sha256.Sum256(r.Bytes))
		}
		logs[name] = l
	}
	res := compareLogs(logs)
	res.Errors = append(errs, res.Errors...)
	res.OK = res.OK && len(res.Errors) == 0
	return res
}

// CheckConvergenceHashes is CheckConvergence for replicas that report a hash per offset.
func CheckConvergenceHashes(replicas map[string]ReplicaHashes) ConvergenceResult {
	logs := map[string]digestLog{}
	for name, h := range replicas {
		l := digestLog{start: h.Start}
		for _, x := range h.Hashes {
			var d [32]byte
			binary.LittleEndian.PutUint64(d[:], x)
			l.sums = append(l.sums, d)
		}
		logs[name] = l
	}
	return compareLogs(logs)
}

type digestLog struct {
	start int64
	sums  [][32]byte
}

func (l digestLog) end() int64 { return l.start + int64(len(l.sums)) }

func compareLogs(logs map[string]digestLog) ConvergenceResult {
	res := ConvergenceResult{OK: true, Replicas: len(logs), FirstDiff: -1}
	names := sortedKeys(logs)
	if len(names) == 0 {
		return res
	}
	lo, hi := logs[names[0]].start, logs[names[0]].end()
	res.CommonEnd = hi
	for _, n := range names {
		lo, hi = min(lo, logs[n].start), max(hi, logs[n].end())
		res.CommonEnd = min(res.CommonEnd, logs[n].end())
	}
	for o := lo; o < hi; o++ {
		var first *[32]byte
		holders, differ := 0, false
		for _, n := range names {
			l := logs[n]
			if o < l.start || o >= l.end() {
				continue
			}
			holders++
			d := &l.sums[o-l.start]
			if first == nil {
				first = d
			} else if *d != *first {
				differ = true
			}
		}
		if holders > 1 {
			res.Compared++
		}
		if differ {
			res.OK, res.FirstDiff = false, o
			groups := map[[32]byte][]string{}
			var order [][32]byte
			for _, n := range names {
				l := logs[n]
				if o < l.start || o >= l.end() {
					continue
				}
				d := l.sums[o-l.start]
				if _, ok := groups[d]; !ok {
					order = append(order, d)
				}
				groups[d] = append(groups[d], n)
			}
			for _, d := range order {
				res.Groups = append(res.Groups, groups[d])
			}
			sort.Slice(res.Groups, func(i, j int) bool { return len(res.Groups[i]) > len(res.Groups[j]) })
			return res
		}
	}
	return res
}
