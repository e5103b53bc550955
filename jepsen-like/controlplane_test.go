package campaign

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// Config servers in a campaign (root: namespaces): three `vdl
// configserver` processes, one per DC, the servers registering with them
// and the streams created through them with a preferred DC each; the
// nemesis kills the config servers' leader, cuts it off, and cuts DCs off
// with their config server; nothing acknowledged is lost, and at the end
// every stream's leader is back in its preferred DC (the balancer), which
// the summary reports; nothing is left behind.
func TestControlPlaneCampaign(t *testing.T) {
	needRoot(t)
	cmds, err := ParseDefinition(strings.NewReader(`
cluster: {servers: 3, streams: 2, dcs: 3, net: netns, config_servers: 3, preferred_dcs: [dc1, dc2], balance_after_ms: 2000}
workload: {producers: 2, all_streams: true}
nemesis: {faults: [cs-kill, cs-partition, partition-dc], interval: 1500ms, seed: 6}
duration: 9s
checks: [acknowledged, linearizable, anomalies]
`))
	require.NoError(t, err)
	dir := t.TempDir()
	t.Run("run", func(t *testing.T) {
		res := RunWith(t, proccluster.Production.Path(t), "control-plane", cmds, Options{ReportDir: dir})
		var report strings.Builder
		WriteReport(&report, "production build", []Result{res})
		require.Equal(t, "PASS", Verdict(res), "%s", report.String())
		require.Contains(t, res.Steps[0].Output, "3 servers and 3 config servers in 3 DCs")
		s := res.Summary
		require.Positive(t, s.FaultCounts["cs-kill"]+s.FaultCounts["cs-partition"], "faults: %v", s.FaultCounts)
		require.Contains(t, s.PreferredDC, "every leader in its preferred DC")
		require.Contains(t, s.PreferredDC, "s1 n1 in dc1 (preferred dc1), s2 n2 in dc2 (preferred dc2)")
	})
	require.Empty(t, Leftovers(os.Getpid()), "the namespaces go with the test")
}
