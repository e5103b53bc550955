package kafka_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Kafka front end depends on the rest of a server only through the
// Backend interface: the package and its helpers (kafkatest, records,
// group, batchfmt) import neither the replication engine nor storage, whose
// errors the Backend's implementation translates (server.kafkaError).
func TestKafkaDependsOnNeitherRaftnodeNorStorage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/vdl-project/vdl/kafka/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/vdl-project/vdl/raftnode", "github.com/vdl-project/vdl/storage"} {
			require.False(t, dep == banned || strings.HasPrefix(dep, banned+"/"), "kafka depends on %s", dep)
		}
	}
}
