// Package testnet hands tests TCP ports on the loopback to bind later (a
// server's listen address that its peers are told before it starts).
//
// A port picked by listening on :0 comes from the kernel's ephemeral range
// (32768-60999 by default), which the outgoing connections of every test
// running meanwhile draw from too: one of them can take the port before
// the server binds it ("address already in use"). These ports come from
// below that range, where only another test could pick the same port. To
// rule that out too, a port handed out is reserved until the process
// exits: in this process by a set, across the test processes `go test`
// runs side by side by a byte-range lock on one shared file (the kernel
// drops the locks of a process that exits, however it exits).
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

const lo, hi = 20000, 32768 // below the default ephemeral range

// Fataler is what FreePorts needs of its caller: a testing.TB, or a
// command's stand-in for one.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

var reserved struct {
	sync.Mutex
	once  sync.Once
	lock  *os.File // nil: no lock file, reservations are per process
	ports map[int]bool
}

// reserve claims port p for the rest of this process's life, or reports
// that this or another test process already has.
func reserve(p int) bool {
	reserved.Lock()
	defer reserved.Unlock()
	reserved.once.Do(func() {
		reserved.ports = map[int]bool{}
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "vdl-testnet-ports.lock"), os.O_RDWR|os.O_CREATE, 0o666)
		if err == nil {
			reserved.lock = f
		}
	})
	if reserved.ports[p] {
		return false
	}
	if reserved.lock != nil {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(p), Len: 1}
		if err := syscall.FcntlFlock(reserved.lock.Fd(), syscall.F_SETLK, &lk); err != nil {
			return false // another test process holds it
		}
	}
	reserved.ports[p] = true
	return true
}

// FreePorts returns n distinct loopback ports that were free a moment ago
// and that no other caller of FreePorts, in this process or another, gets
// while this process runs.
func FreePorts(tb Fataler, n int) []int {
	tb.Helper()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			tb.Fatalf("testnet: no free port in [%d, %d) after %d tries", lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if !free(p) || !reserve(p) {
			continue
		}
		ports = append(ports, p)
	}
	return ports
}

// free reports whether nothing listens on port p of the loopback.
func free(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// FreeAddr returns a loopback address ("127.0.0.1:port") that was free a
// moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePorts(tb, 1)[0])
}
