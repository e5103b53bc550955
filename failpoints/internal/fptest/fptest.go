// Package fptest holds a few failpoint markers and a tiny HTTP server for
// the tests of the failpoint control plane (the chain build → serve →
// enable → fire, and the production build guarantee). It is what a real
// package with markers looks like; cmd/fptest is its program.
package fptest

import (
	"net/http"

	"github.com/pingcap/failpoint"

	"github.com/vdl-project/vdl/failpoints"
)

// Write fails with the injected I/O error when demoIOError fires with true.
func Write() error {
	failpoint.Inject("demoIOError", func(val failpoint.Value) {
		failpoints.Hit("failpoints/internal/fptest/demoIOError")
		if failpoints.Bool(val) {
			failpoint.Return(failpoints.IOError())
		}
	})
	return nil
}

// MaybeCrash kills the process when demoCrash fires with true.
func MaybeCrash() {
	failpoint.Inject("demoCrash", func(val failpoint.Value) {
		failpoints.Hit("failpoints/internal/fptest/demoCrash")
		if failpoints.Bool(val) {
			failpoints.Crash()
		}
	})
}

// Step passes demoBeforeStep, which the tests pause and sleep.
func Step() {
	failpoint.Inject("demoBeforeStep", func(_ failpoint.Value) {
		failpoints.Hit("failpoints/internal/fptest/demoBeforeStep")
	})
}

// NewMux returns the test server's routes: the failpoint control plane
// (failpoint build only) and one route per marker.
func NewMux() *http.ServeMux {
	mux := http.NewServeMux()
	failpoints.Mount(mux)
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if err := Write(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/crash", func(w http.ResponseWriter, r *http.Request) {
		MaybeCrash()
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/step", func(w http.ResponseWriter, r *http.Request) {
		Step()
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
