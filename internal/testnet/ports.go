// Package testnet hands tests TCP ports on the loopback to bind later (a
// server's listen address that its peers are told before it starts).
//
// A port picked by listening on :0 comes from the kernel's ephemeral range
// (32768-60999 by default), which the outgoing connections of every test
// running meanwhile draw from too: one of them can take the port before
// the server binds it ("address already in use"). These ports come from
// below that range, where only another test picking the same port could
// collide, and are drawn at random so that is rare.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

const lo, hi = 20000, 32768 // below the default ephemeral range

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			tb.Fatalf("testnet: no free port in [%d, %d) after %d tries", lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		held = append(held, l) // held until all are picked: distinct
		ports = append(ports, p)
	}
	return ports
}

// FreeAddr returns a loopback address ("127.0.0.1:port") that was free a
// moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePorts(tb, 1)[0])
}
