package integration

// The cluster harness is internal/proccluster (shared with failpointtest):
// three `vdl server` processes of the production build on 127.0.0.1 with
// free ports, health and serving-leader waits, kill -9 and restart on the
// same config and data dir, the servers' log tails printed when a test
// fails.

import (
	"testing"

	"github.com/vdl-project/vdl/internal/proccluster"
)

func TestMain(m *testing.M) { proccluster.Main(m, nil) }

type (
	// Options shape a test cluster.
	Options = proccluster.Options
	// Cluster is three server processes.
	Cluster = proccluster.Cluster
)

// StartCluster starts a 3-node cluster of the production build (go build
// ./cmd/vdl, once per test binary) and waits until every stream has a
// leader that serves Kafka requests.
func StartCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	return proccluster.Start(tb, proccluster.Production.Path(tb), opts)
}
