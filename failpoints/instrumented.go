//go:build failpoint

package failpoints

import (
	"net/http"

	"github.com/vdl-project/vdl/failpoints/internal/fpbackend"
)

// Instrumented reports whether this binary is a failpoint build.
const Instrumented = true

var std = newRegistry(fpbackend.Lib{})

// Register adds failpoint definitions to the registry. Call it from an init
// in a file guarded by "//go:build failpoint", in the package that holds the
// markers. It panics on a malformed or duplicate definition. It exists only
// in the failpoint build, so a registration file without the build tag
// breaks the production build instead of leaking names into it.
func Register(defs ...Def) {
	if err := std.register(defs...); err != nil {
		panic(err)
	}
}

// Hit counts one firing of the marker name (a short name). Every marker body
// calls it first: a hit is an evaluation whose term fired, i.e. was allowed
// by its p%/n* modifiers and whose action (return, off, print, or sleep and
// pause once over) let the body run.
func Hit(name string) { std.hit(name) }

// List returns every registered (compiled-in) failpoint.
func List() []Info { return std.list() }

// Get returns one failpoint, by short or full name.
func Get(name string) (Info, error) {
	e, err := std.lookup(name)
	if err != nil {
		return Info{}, err
	}
	return std.info(e), nil
}

// Enable sets a registered failpoint's term in this process (tests, the
// simulator). Like the HTTP PUT, it validates the term and disables first.
func Enable(name, term string) error { return std.enable(name, term, nil) }

// Disable disables a registered failpoint in this process.
func Disable(name string) error { return std.disable(name) }

// Handler returns the control plane; mount it at Prefix and Prefix + "/".
func Handler() http.Handler { return std }

// Mount mounts Handler on mux at Prefix.
func Mount(mux *http.ServeMux) {
	mux.Handle(Prefix, std)
	mux.Handle(Prefix+"/", std)
}

// StartupCheck reports failpoints that GO_FAILPOINTS enabled (the library
// reads it in its init) but that are not registered. Call it once all
// packages are initialized (first thing in main); the server logs the error
// and refuses to start.
func StartupCheck() error { return std.startupCheck() }
