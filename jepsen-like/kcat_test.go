package campaign

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// kcat (librdkafka) is a second client: its produces and fetches go into
// the same history as franz-go's, while the nemesis kills and pauses
// servers, and the checks hold both to the same rules.
func TestKcatClient(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat; .ci/run installs it)")
	}
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1
nemesis faults=kill,pause interval=1500ms seed=9
workload producers=1 kcat-producers=2 kcat-consumers=1 duration=5s
check
`))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "kcat")
	res := RunWith(t, proccluster.Production.Path(t), "kcat", cmds, Options{ReportDir: dir})
	var report strings.Builder
	WriteReport(&report, "production build", []Result{res})
	require.Equal(t, "PASS", Verdict(res), "%s", report.String())
	require.Regexp(t, `2 kcat producers: [1-9]\d* acknowledged`, res.Steps[2].Output)
	require.Regexp(t, `1 kcat consumers read [1-9]\d* records`, res.Steps[2].Output)
	s := res.Summary
	require.Positive(t, s.Outcomes["produce kcat"][checker.OutcomeOK])
	require.Positive(t, s.Outcomes["fetch kcat"][checker.OutcomeOK])
	require.Positive(t, s.Outcomes["produce franz-go"][checker.OutcomeOK])
	require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
}
