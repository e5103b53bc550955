package failpoints

import (
	"fmt"
	"os"
)

// The failpoint library's init starts its own, unchecked HTTP control
// listener when GO_FAILPOINTS_HTTP is set, in every binary that imports it,
// production binaries included (they import it for the no-op markers). Every
// package with markers also imports this package (for Hit), and this init
// runs right after the library's, before main: a VDL binary started with
// GO_FAILPOINTS_HTTP set refuses to start, so that listener never serves.
// The control plane is the admin HTTP's /debug/failpoints, and only in the
// failpoint build.
func init() {
	if v, ok := os.LookupEnv("GO_FAILPOINTS_HTTP"); ok {
		fmt.Fprintf(os.Stderr, "vdl: GO_FAILPOINTS_HTTP=%q is not supported: use the admin HTTP control plane of a failpoint build (make build-failpoint)\n", v)
		os.Exit(2)
	}
}
