package campaign

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// netHelper is what the test binary does when a test runs it inside a
// namespace (ip netns exec NS <test binary>) with VDLJ_HELPER set:
// "listen ADDR" accepts connections and writes "ok" to each; "dial ADDR"
// exits 0 if it connected and read "ok" within a second, 1 otherwise.
func netHelper() bool {
	mode, addr, ok := strings.Cut(os.Getenv("VDLJ_HELPER"), " ")
	if !ok {
		return false
	}
	switch mode {
	case "listen":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, 400*time.Millisecond)
		if err != nil {
			os.Exit(1)
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "ok" {
			os.Exit(1)
		}
		os.Exit(0)
	}
	return wanHelper(mode, addr)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
}

// The topology: each node in its own namespace at its DC's address,
// reachable from the host (where the clients run) and from each other
// through the router; Cut drops exactly the directed links it is given
// (symmetric, one way, a whole DC), Heal restores them, and Close removes
// every namespace and the host interface.
func TestTopology(t *testing.T) {
	needRoot(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	topo, err := NewTopology(4, NetSpec{DCs: 2})
	require.NoError(t, err)
	defer topo.Close()
	require.Equal(t, 1, topo.DCOf(1))
	require.Equal(t, 2, topo.DCOf(2))
	require.Equal(t, 1, topo.DCOf(3))

	const port = "7777"
	for id := uint64(1); id <= 4; id++ {
		cmd := exec.Command("ip", append(topo.Wrap(id)[1:], exe)...)
		cmd.Env = append(os.Environ(), "VDLJ_HELPER=listen "+net.JoinHostPort(topo.Host(id), port))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, _ := bufio.NewReader(out).ReadString('\n')
		require.Equal(t, "listening\n", line, "node %d's listener", id)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	reach := func(from, to uint64) bool {
		cmd := exec.Command("ip", append(topo.Wrap(from)[1:], exe)...)
		cmd.Env = append(os.Environ(), "VDLJ_HELPER=dial "+net.JoinHostPort(topo.Host(to), port))
		return cmd.Run() == nil
	}
	fromHost := func(to uint64) bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(topo.Host(to), port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	all := func(want func(from, to uint64) bool) {
		t.Helper()
		for from := uint64(1); from <= 4; from++ {
			for to := uint64(1); to <= 4; to++ {
				if from != to {
					require.Equal(t, want(from, to), reach(from, to), "n%d -> n%d", from, to)
				}
			}
			require.True(t, fromHost(from), "host -> n%d", from)
		}
	}
	all(func(_, _ uint64) bool { return true })

	// n1 cut off from everyone, both ways.
	require.NoError(t, topo.Cut(cutPairs([]uint64{1}, []uint64{2, 3, 4}, true)))
	all(func(from, to uint64) bool { return from != 1 && to != 1 })
	// One way: what n2 sends to n3 is lost (a TCP handshake then fails
	// both ways; n3 -> n4 and n4 -> n2 still work).
	require.NoError(t, topo.Cut(cutPairs([]uint64{2}, []uint64{3}, false)))
	require.False(t, reach(2, 3))
	require.True(t, reach(2, 4))
	require.True(t, reach(1, 2), "the earlier cut was replaced")
	// A whole DC (n1, n3) from the other (n2, n4).
	require.NoError(t, topo.Cut(cutPairs([]uint64{1, 3}, []uint64{2, 4}, true)))
	all(func(from, to uint64) bool { return topo.DCOf(from) == topo.DCOf(to) })
	require.NoError(t, topo.Heal())
	all(func(_, _ uint64) bool { return true })

	require.NoError(t, topo.Close())
	require.Empty(t, Leftovers(os.Getpid()))
}

// A latency matrix is applied with tc netem, where the kernel has it: a
// connection from DC 1 to DC 2 takes the added delay.
func TestTopologyLatency(t *testing.T) {
	needRoot(t)
	if !NetemAvailable() {
		t.Skip("this kernel has no sch_netem (tc netem): no delay can be added")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	topo, err := NewTopology(2, NetSpec{DCs: 2, LatencyMillis: [][]float64{{0, 100}, {100, 0}}})
	require.NoError(t, err)
	defer topo.Close()
	cmd := exec.Command("ip", append(topo.Wrap(2)[1:], exe)...)
	cmd.Env = append(os.Environ(), "VDLJ_HELPER=listen "+net.JoinHostPort(topo.Host(2), "7777"))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_, _ = bufio.NewReader(out).ReadString('\n')
	dial := exec.Command("ip", append(topo.Wrap(1)[1:], exe)...)
	dial.Env = append(os.Environ(), "VDLJ_HELPER=dial "+net.JoinHostPort(topo.Host(2), "7777"))
	start := time.Now()
	require.NoError(t, dial.Run())
	require.Greater(t, time.Since(start), 200*time.Millisecond, "a round trip across DCs takes 2 x 100 ms")
}

// A campaign (a YAML definition) in network namespaces: the servers listen on their own
// addresses, the nemesis cuts one node off, one node's sending, and a
// whole DC (nft rules inside the namespaces), kills and pauses, every
// acknowledged record survives, and the replicas' logs, read from their
// data dirs once the servers stopped, hold byte-identical batches; nothing
// is left behind.
func TestNetnsCampaign(t *testing.T) {
	needRoot(t)
	cmds, err := ParseDefinition(strings.NewReader(`# a YAML definition
cluster: {servers: 3, dcs: 3, net: netns}
workload: {producers: 3, consumers: 1}
nemesis: {faults: [partition, partition-oneway, partition-dc, kill, pause], interval: 1200ms, seed: 4}
duration: 7s
checks: [acknowledged, linearizable, anomalies, replicas-agree, replicas-converge]
`))
	require.NoError(t, err)
	dir := t.TempDir()
	t.Run("run", func(t *testing.T) {
		res := RunWith(t, proccluster.Production.Path(t), "netns", cmds, Options{ReportDir: dir})
		var report strings.Builder
		WriteReport(&report, "production build", []Result{res})
		require.Equal(t, "PASS", Verdict(res), "%s", report.String())
		require.Regexp(t, `network: vdlj-\d+-\d+: 3 servers in 3 DCs, 10\.\d+\.0\.0/16`, res.Steps[0].Output)
		require.Regexp(t, `nemesis: .*(partition|partition-oneway|partition-dc) n\d`, res.Steps[2].Output)
		require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
		require.Regexp(t, `s1: 3 replicas' logs compared up to offset [1-9]\d* \([1-9]\d* batches held by two or more\): byte-identical`, res.Steps[3].Output)
		require.True(t, strings.HasPrefix(res.Summary.Net, "netns vdlj-"), res.Summary.Net)
	})
	require.Empty(t, Leftovers(os.Getpid()), "the namespaces go with the test")
}
