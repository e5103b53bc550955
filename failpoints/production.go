//go:build !failpoint

package failpoints

import (
	"errors"
	"net/http"
	"os"
)

// Instrumented reports whether this binary is a failpoint build.
const Instrumented = false

// Handler returns nil in a production build: there is no control plane.
func Handler() http.Handler { return nil }

// Mount does nothing in a production build, so /debug/failpoints answers 404.
func Mount(mux *http.ServeMux) {}

// Hit does nothing in a production build (marker bodies never run there).
func Hit(name string) {}

// StartupCheck returns an error when GO_FAILPOINTS is set, since a
// production build has no failpoints to enable. The server logs it and
// refuses to start.
func StartupCheck() error {
	if _, ok := os.LookupEnv("GO_FAILPOINTS"); ok {
		return errors.New("GO_FAILPOINTS is set but this is a production build without failpoints (use make build-failpoint)")
	}
	return nil
}
