// Package rng gives seeded, independent random streams. Every consumer of
// randomness (network, each disk, workload, nemesis) draws from its own
// stream derived from hash(seed, name), so adding draws in one subsystem
// never shifts the choices of another, and one seed reproduces a run.
package rng

import (
	"hash/fnv"
	"math/rand/v2"
)

// Rand is the randomness VDL code may use. *rand.Rand satisfies it.
type Rand interface {
	Uint64() uint64
	IntN(n int) int
	Int64N(n int64) int64
	Float64() float64
}

// New returns the stream called name under seed.
func New(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
