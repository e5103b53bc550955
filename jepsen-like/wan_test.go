package campaign

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wanHelper is the helper's WAN modes (VDLJ_HELPER="MODE ADDR"): "echo"
// echoes what TCP connections and UDP datagrams bring; "rtt" prints the
// median of 20 one-byte TCP round trips in microseconds; "udp N" (ADDR
// then N) sends N datagrams a millisecond apart and prints how many came
// back within half a second after the last.
func wanHelper(mode, addr string) bool {
	fail := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	switch mode {
	case "echo":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fail(err)
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			fail(err)
		}
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	case "rtt":
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fail(err)
		}
		var rtts []time.Duration
		b := []byte{1}
		for i := range 21 {
			start := time.Now()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(b); err != nil {
				fail(err)
			}
			if _, err := io.ReadFull(c, b); err != nil {
				fail(err)
			}
			if i > 0 {
				rtts = append(rtts, time.Since(start))
			}
		}
		slices.Sort(rtts)
		fmt.Println(rtts[len(rtts)/2].Microseconds())
		os.Exit(0)
	case "udp":
		target, n, _ := strings.Cut(addr, " ")
		count, err := strconv.Atoi(n)
		if err != nil {
			fail(err)
		}
		c, err := net.Dial("udp", target)
		if err != nil {
			fail(err)
		}
		got := map[string]bool{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64)
			for {
				k, err := c.Read(buf)
				if err != nil {
					return
				}
				got[string(buf[:k])] = true
			}
		}()
		for i := range count {
			_, _ = c.Write([]byte(strconv.Itoa(i)))
			time.Sleep(time.Millisecond)
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		<-done
		fmt.Println(len(got))
		os.Exit(0)
	}
	return false
}

// The userspace WAN's schedule: the matrix's delay on average, jitter
// that never releases a packet before the previous one of its (src, dst)
// pair, the loss rate, and nothing added within a DC.
func TestWANSchedule(t *testing.T) {
	s := newWANSched(NetSpec{DCs: 2, LatencyMillis: [][]float64{{0, 20}, {30, 0}}, JitterMillis: 10,
		LossPercent: [][]float64{{0, 25}, {0, 0}}}, 7)
	t0 := time.Now()
	var last time.Time
	var total time.Duration
	var delays []float64
	sent, dropped := 0, 0
	for i := range 20000 {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		at, ok := s.due(now, 1, 2)
		sent++
		if !ok {
			dropped++
			continue
		}
		require.False(t, at.Before(last), "packet %d released before the previous one", i)
		require.False(t, at.Before(now), "packet %d released before it came", i)
		last = at
		total += at.Sub(now)
		delays = append(delays, float64(at.Sub(now))/float64(time.Millisecond))
	}
	mean := float64(total/time.Duration(sent-dropped)) / float64(time.Millisecond)
	require.InDelta(t, 20, mean, 3, "the mean one-way delay (ms): the no-earlier rule does not push it up")
	var sq float64
	for _, d := range delays {
		sq += (d - mean) * (d - mean)
	}
	require.InDelta(t, 10, math.Sqrt(sq/float64(len(delays))), 4, "the delay's deviation (ms): the jitter")
	require.InDelta(t, 0.25, float64(dropped)/float64(sent), 0.04, "the loss rate")
	at, ok := s.due(t0, 2, 1)
	require.True(t, ok, "no loss from DC 2 to DC 1")
	require.InDelta(t, 30, float64(at.Sub(t0))/float64(time.Millisecond), 45, "DC 2 -> DC 1")
	at, ok = s.due(t0, 1, 1)
	require.True(t, ok)
	require.Equal(t, t0, at, "nothing added within a DC")
	at, _ = s.due(t0, 0, 2)
	require.Equal(t, t0, at, "nothing added to what comes from outside the run")
}

// The userspace WAN in a topology (root; it works whether or not the
// kernel has netem): a TCP round trip between DC 1 and DC 2, 20 ms away
// one way, takes 40 ms; the host reaches a server without it; a quarter
// of the datagrams between DC 1 and DC 3 are lost each way; Close
// removes the TUN device, rules and routes with the router namespace.
func TestTopologyUserspaceWAN(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	topo, err := NewTopology(3, NetSpec{DCs: 3, Shaper: ShaperUserspace,
		LatencyMillis: [][]float64{{0, 20, 1}, {20, 0, 1}, {1, 1, 0}}, JitterMillis: 2,
		LossPercent: [][]float64{{0, 0, 25}, {0, 0, 0}, {25, 0, 0}}})
	require.NoError(t, err)
	defer topo.Close()
	require.Contains(t, topo.Describe(), "userspace WAN")
	router := topo.router
	out, err := exec.Command("ip", "-n", router, "rule", "show").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "iif br1 lookup 101")

	helper := func(id uint64, env string) *exec.Cmd {
		cmd := exec.Command("ip", append(topo.Wrap(id)[1:], exe)...)
		cmd.Env = append(os.Environ(), "VDLJ_HELPER="+env)
		return cmd
	}
	const port = "7778"
	for _, id := range []uint64{2, 3} {
		cmd := helper(id, "echo "+net.JoinHostPort(topo.Host(id), port))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		require.Equal(t, "listening\n", line, "n%d's echo", id)
	}
	rtt, err := helper(1, "rtt "+net.JoinHostPort(topo.Host(2), port)).Output()
	require.NoError(t, err)
	us, err := strconv.Atoi(strings.TrimSpace(string(rtt)))
	require.NoError(t, err)
	require.InDelta(t, 40, float64(us)/1000, 10, "the TCP round trip DC 1 <-> DC 2 (ms), 20 ms each way")
	t.Logf("TCP round trip DC 1 <-> DC 2: %.1f ms (20 ms one way configured)", float64(us)/1000)

	c, err := net.DialTimeout("tcp", net.JoinHostPort(topo.Host(2), port), time.Second)
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Write([]byte{1})
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, 1))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Millisecond, "the host's clients are not behind the WAN")
	c.Close()

	const sent = 400
	got, err := helper(1, fmt.Sprintf("udp %s %d", net.JoinHostPort(topo.Host(3), port), sent)).Output()
	require.NoError(t, err)
	back, err := strconv.Atoi(strings.TrimSpace(string(got)))
	require.NoError(t, err)
	// 25 % each way: 0.75² = 56 % come back.
	require.InDelta(t, 0.5625, float64(back)/sent, 0.12, "datagrams back from DC 3 (%d of %d)", back, sent)
	require.Positive(t, topo.wan.Dropped.Load())
	t.Logf("UDP DC 1 <-> DC 3 with 25%% loss each way: %d of %d back; the WAN dropped %d, forwarded %d",
		back, sent, topo.wan.Dropped.Load(), topo.wan.Forwarded.Load())

	require.NoError(t, topo.Close())
	require.Empty(t, Leftovers(os.Getpid()))
	_, err = os.Stat("/run/netns/" + router)
	require.True(t, os.IsNotExist(err), "the router namespace (the TUN device, its rules and routes) is gone")
}
