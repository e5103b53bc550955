//go:build race

package storage

// The race detector slows the crash test about tenfold.
const raceEnabled = true
