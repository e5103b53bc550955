// Package selfcpu tells the CPU time this process has used, for benchmarks
// that set work against what it cost.
package selfcpu

import (
	"syscall"
	"time"
)

// Used is the user and system CPU time this process has used so far
// (getrusage); 0 if the system cannot tell.
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
