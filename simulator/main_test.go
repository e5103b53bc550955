package simulator

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain: the simulator allocates heavily on one goroutine and the
// machine has memory to spare, so the batch runs with a lazier garbage
// collector (a quarter of a batch's CPU went to it at the default 100).
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}
