package testnet

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFreePortsAreNeverHandedOutTwiceInAProcess(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		for _, p := range FreePorts(t, 5) {
			require.False(t, seen[p], "port %d handed out twice", p)
			require.True(t, p >= lo && p < hi, "port %d outside [%d, %d)", p, lo, hi)
			seen[p] = true
		}
	}
}

// TestFreePortsAreReservedAcrossProcesses runs a second test process that
// takes ports: this one cannot take them while it lives, and can once it
// has exited.
func TestFreePortsAreReservedAcrossProcesses(t *testing.T) {
	if os.Getenv("TESTNET_CHILD") != "" {
		fmt.Println(strings.Trim(fmt.Sprint(FreePorts(t, 50)), "[]"))
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent says
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortsAreReservedAcrossProcesses$")
	cmd.Env = append(os.Environ(), "TESTNET_CHILD=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	var theirs []int
	for _, f := range strings.Fields(line) {
		p, err := strconv.Atoi(f)
		require.NoError(t, err, "child printed %q", line)
		theirs = append(theirs, p)
	}
	require.Len(t, theirs, 50)
	for _, p := range theirs {
		require.False(t, reserve(p), "port %d reserved by the other process was handed out here", p)
	}
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	for _, p := range theirs {
		require.True(t, reserve(p), "port %d still reserved after its process exited", p)
	}
}
