//go:build race

package clustertest

// raceEnabled reports whether the race detector is on; tests scale down.
const raceEnabled = true
