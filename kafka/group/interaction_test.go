package group

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios replays the coordinator scripts in testdata/ (etcd raft's
// interaction tests): members join, sync, heartbeat, leave and commit on a
// clock the script advances, and each command prints its answer and the
// answers of parked requests it completed. `go test -rewrite` rewrites
// the expected output. The commands are in scenario_*_test.go.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newScenario()
		datadriven.RunTest(t, path, s.handle)
	})
}
