// Package failpoints is VDL's failpoint control plane: a registry of every
// compiled-in failpoint marker, hit counters, the admin HTTP handler mounted
// under /debug/failpoints, a Go client, and the effect helpers that marker
// bodies call (Crash, IOError, Sleep, value predicates).
//
// Markers are github.com/pingcap/failpoint markers. They are empty no-ops
// until the failpoint build (make build-failpoint: go build -tags failpoint
// -toolexec failpoint-toolexec) rewrites them. The registry entries live in
// files guarded by the build tag "failpoint", so a production binary carries
// neither the names nor the control plane: Handler returns nil and Mount
// mounts nothing. See docs/failpoints.md.
//
// A marker, in package github.com/vdl-project/vdl/storage:
//
//	failpoint.Inject("beforeSync", func(val failpoint.Value) {
//		failpoints.Hit("storage/beforeSync")
//		if failpoints.Bool(val) {
//			failpoints.Crash()
//		}
//	})
//
// and its entry, in storage/failpoints.go (first line "//go:build failpoint"):
//
//	func init() {
//		failpoints.Register(failpoints.Def{
//			Name:   "storage/beforeSync",
//			Place:  "storage: (*Log).Sync, before fsync of the active segment",
//			Effect: "return(true): crash (SIGKILL) before fsync",
//		})
//	}
package failpoints
