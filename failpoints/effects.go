package failpoints

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Effect helpers for marker bodies. The failpoint library calls a marker body
// whenever an evaluation fires, with the term's value for return(v) and with
// nil for off, sleep, pause and print (and for a bare "return"). So bodies
// must test the value with the comma-ok helpers below and never assert types
// directly: Bool(nil) is false, so a body guarded by Bool(val) does nothing
// for sleep/pause/off/print.

// ErrIO is the error IOError returns. errors.Is(err, syscall.EIO) holds.
var ErrIO = fmt.Errorf("failpoint: injected I/O error: %w", syscall.EIO)

// IOError returns the injected I/O error (ErrIO, which wraps syscall.EIO).
func IOError() error { return ErrIO }

// EIO reports whether the term's value asks for an I/O error: return("eio").
// Markers that can fail their function return IOError() then.
func EIO(v any) bool {
	s, ok := v.(string)
	return ok && s == "eio"
}

// Crash ends the process at once, like kill -9: it sends SIGKILL to itself.
// No deferred function, no recover, no exit handler and no buffered-writer
// flush runs; the kernel just drops the process, as in a power cut of the
// process (but not of the page cache: data already written to files stays).
// Prefer it to the "panic" term, which a recovering goroutine (net/http
// handlers, for one) swallows.
func Crash() {
	_, _ = os.Stderr.WriteString("vdl failpoint: crash (SIGKILL)\n")
	for {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		// The signal is delivered asynchronously; never return meanwhile.
		// (time.Sleep, unlike select{}, cannot trip the deadlock detector.)
		time.Sleep(time.Millisecond)
	}
}

// powerLoss is the process's power switch (SetPowerLoss).
var powerLoss atomic.Pointer[func()]

// SetPowerLoss installs what PowerLoss does before the process dies: the
// failpoint build's server drops what its data file system never synced
// (vfs.Lazy.PowerLoss).
func SetPowerLoss(f func()) { powerLoss.Store(&f) }

// PowerLoss ends the process as a power cut would: every write not synced,
// and every create, rename and remove not made durable, is lost (through
// the switch SetPowerLoss installed; without one it is Crash), then the
// process dies like Crash.
func PowerLoss() {
	if f := powerLoss.Load(); f != nil {
		_, _ = os.Stderr.WriteString("vdl failpoint: power loss\n")
		(*f)()
	}
	Crash()
}

// CrashOn ends the process when the term asks for it: return(true) crashes
// it (Crash: like kill -9, the page cache survives), return("powerloss")
// cuts its power (PowerLoss: what was not synced is lost). Other values do
// nothing.
func CrashOn(v any) {
	switch {
	case Bool(v):
		Crash()
	case v == "powerloss":
		PowerLoss()
	}
}

// Sleep sleeps ms milliseconds. (The "sleep(ms)" term sleeps inside the
// library before the body runs; Sleep is for bodies that compute a delay.)
func Sleep(ms int) { time.Sleep(time.Duration(ms) * time.Millisecond) }

// Bool reports whether v is true, or the string "true": return(true).
func Bool(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return x == "true"
	}
	return false
}

// Int returns v as an int: return(3) or return("3").
func Int(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	}
	return 0, false
}

// String returns v as a string: return("torn").
func String(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// Peer returns the peer (node) ID a term names: return(2) or return("2").
func Peer(v any) (uint64, bool) {
	switch x := v.(type) {
	case int:
		return uint64(x), x > 0
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil && n > 0
	}
	return 0, false
}

// IsPeer reports whether the term's value names peer id: a drop-to/from-peer
// marker does `if failpoints.IsPeer(val, to) { drop }`. The value is one
// peer, return(2), or a list, return("2,3") (one side of a partition).
// return(0) or return(true) would be errors in such a term; they match
// nothing.
func IsPeer(v any, id uint64) bool {
	if s, ok := v.(string); ok && strings.Contains(s, ",") {
		for _, f := range strings.Split(s, ",") {
			if p, ok := Peer(strings.TrimSpace(f)); ok && p == id {
				return true
			}
		}
		return false
	}
	p, ok := Peer(v)
	return ok && p == id
}
