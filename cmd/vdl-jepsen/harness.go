package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	campaign "github.com/vdl-project/vdl/jepsen-like"
)

// harness is proccluster.T for a command: Fatal aborts the script
// (campaign.Abort), cleanups run when the script ends, temporary
// directories go with them.
type harness struct {
	verbose  bool
	log      io.Writer
	mu       sync.Mutex // cleanups, failed (a step's goroutines and the signal handler)
	failed   bool
	cleanups []func()
	// interrupted: a signal is ending the run; a Fatal from then on (a
	// restart failing on a killed cluster, say) blocks instead of raising,
	// so the cleanups finish before the process exits.
	interrupted atomic.Bool
}

func newHarness(verbose bool, log io.Writer) *harness { return &harness{verbose: verbose, log: log} }

func (h *harness) Helper() {}

func (h *harness) Logf(format string, args ...any) {
	if h.verbose {
		fmt.Fprintf(h.log, format+"\n", args...)
	}
}

func (h *harness) Error(args ...any) {
	h.setFailed()
	fmt.Fprintln(h.log, args...)
}

func (h *harness) Errorf(format string, args ...any) {
	h.setFailed()
	fmt.Fprintf(h.log, format+"\n", args...)
}

func (h *harness) Fatal(args ...any) {
	h.setFailed()
	h.blockIfInterrupted()
	panic(campaign.Abort{Msg: fmt.Sprint(args...)})
}

func (h *harness) Fatalf(format string, args ...any) {
	h.setFailed()
	h.blockIfInterrupted()
	panic(campaign.Abort{Msg: fmt.Sprintf(format, args...)})
}

func (h *harness) setFailed() {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
}

func (h *harness) blockIfInterrupted() {
	if h.interrupted.Load() {
		select {}
	}
}

func (h *harness) Failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

func (h *harness) Cleanup(f func()) {
	h.mu.Lock()
	h.cleanups = append(h.cleanups, f)
	h.mu.Unlock()
}

func (h *harness) TempDir() string {
	dir, err := os.MkdirTemp("", "vdl-campaign-")
	if err != nil {
		h.Fatal(err)
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cleanup runs the cleanups last-in first-out, as testing does; a Fatal
// in one (a process that would not stop) is reported, not raised.
func (h *harness) cleanup() {
	h.mu.Lock()
	cleanups := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if p := recover(); p != nil {
					fmt.Fprintf(h.log, "cleanup: %v\n", p)
				}
			}()
			cleanups[i]()
		}()
	}
}
