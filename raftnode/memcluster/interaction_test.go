package memcluster

import (
	"testing"
	"testing/cryptotest"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios replays the scripts in testdata/ (etcd raft's interaction
// tests): each command drives the cluster and prints what it did or the
// cluster's state, which must match the script. `go test -rewrite`
// rewrites the expected output. The commands are in scenario_*_test.go.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		// etcd raft draws election timeouts from crypto/rand: pin it so
		// the script replays exactly.
		cryptotest.SetGlobalRandom(t, 1)
		s := &scenario{}
		defer s.close()
		datadriven.RunTest(t, path, s.handle)
	})
}
