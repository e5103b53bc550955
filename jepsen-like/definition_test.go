package campaign

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A YAML definition becomes the script it stands for; what it gets wrong
// (an unknown field, fault or check, disk-full without a disk size) is an
// error, not a silently different campaign.
func TestParseDefinition(t *testing.T) {
	cmds, err := ParseDefinition(strings.NewReader(`
cluster:
  servers: 5
  dcs: 3
  net: netns
  latency_ms: [[0, 20, 40], [20, 0, 30], [40, 30, 0]]
  jitter_ms: 2.5
  disk_mib: 48
workload: {producers: 3, consumers: 1, kcat_producers: 2}
nemesis: {faults: [kill, partition-dc, disk-full], interval: 2s, seed: 7}
duration: 20s
checks: [acknowledged, linearizable, replicas-converge]
`))
	require.NoError(t, err)
	var got []string
	for _, c := range cmds {
		got = append(got, c.String())
	}
	require.Equal(t, []string{
		"start-cluster dcs=3 disk=48 jitter=2.5 latency=0,20,40/20,0,30/40,30,0 net=netns nodes=5 streams=1",
		"nemesis faults=kill,partition-dc,disk-full interval=2s seed=7",
		"workload consumers=1 duration=20s kcat-producers=2 producers=3",
		"check converge=1",
	}, got)

	for _, bad := range []string{
		"cluster: {servers: 3, colour: red}\nworkload: {producers: 1}\nduration: 1s\n",
		"cluster: {servers: 3}\nworkload: {producers: 1}\nnemesis: {faults: [meteor], interval: 1s}\nduration: 1s\n",
		"cluster: {servers: 3}\nworkload: {producers: 1}\nnemesis: {faults: [disk-full], interval: 1s}\nduration: 1s\n",
		"cluster: {servers: 3}\nworkload: {producers: 1}\nduration: 1s\nchecks: [vibes]\n",
		"cluster: {servers: 3}\nworkload: {producers: 1}\nduration: soon\n",
		"cluster: {servers: 3}\nworkload: {producers: 1}\nnemesis: {faults: [cs-kill], interval: 1s}\nduration: 1s\n",
		"cluster: {servers: 3, preferred_dcs: [dc1]}\nworkload: {producers: 1}\nduration: 1s\n",
	} {
		_, err := ParseDefinition(strings.NewReader(bad))
		require.Error(t, err, bad)
	}

	cmds, err = ParseDefinition(strings.NewReader("cluster: {servers: 3, streams: 2, dcs: 3, config_servers: 3, preferred_dcs: [dc1, dc3], balance_after_ms: 2000}\n" +
		"workload: {producers: 1}\nnemesis: {faults: [cs-kill, cs-partition], interval: 1s}\nduration: 1s\n"))
	require.NoError(t, err)
	require.Equal(t, "start-cluster balance-after=2000 config-servers=3 dcs=3 nodes=3 preferred=dc1,dc3 streams=2", cmds[0].String())

	// Every definition of the repository parses.
	paths, err := filepath.Glob(filepath.Join("campaigns", "*.yaml"))
	require.NoError(t, err)
	extra, err := filepath.Glob(filepath.Join("campaigns", "extra", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range append(paths, extra...) {
		f, err := os.Open(p)
		require.NoError(t, err)
		_, err = ParseFile(p, f)
		f.Close()
		require.NoError(t, err, p)
	}
	require.Equal(t, "dc3_all_nemeses", CampaignName("jepsen-like/campaigns/dc3_all_nemeses.yaml"))
}
