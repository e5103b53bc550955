package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The default tail cache budget is a fraction of memory within its bounds.
func TestDefaultTailBudget(t *testing.T) {
	b := defaultTailBudget()
	require.GreaterOrEqual(t, b, int64(minTailBudget))
	require.LessOrEqual(t, b, int64(maxTailBudget))
	if m := memoryLimit(); m > 0 {
		require.Equal(t, min(max(m/16, minTailBudget), maxTailBudget), b)
	}
}
