package server

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func gcSettings() (percent int, limit int64) {
	percent = debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1) // negative: read only
}

// TestTuneGC: a server process lets the heap grow by gcPercent between
// collections, up to its share of the memory, unless the operator set
// GOGC or GOMEMLIMIT; undo puts back what was.
func TestTuneGC(t *testing.T) {
	require.Positive(t, memoryLimit())
	before, beforeLimit := gcSettings()

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	undo := TuneGC(3)
	percent, limit := gcSettings()
	require.Equal(t, gcPercent, percent)
	require.Equal(t, 3*memoryLimit()/gcMemoryDivisor, limit)
	undo()
	percent, limit = gcSettings()
	require.Equal(t, before, percent)
	require.Equal(t, beforeLimit, limit)

	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	undo = TuneGC(1)
	percent, limit = gcSettings()
	require.Equal(t, before, percent, "the operator's GOGC wins")
	require.Equal(t, beforeLimit, limit, "the operator's GOMEMLIMIT wins")
	undo()
}
