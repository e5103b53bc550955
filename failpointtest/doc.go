// Package failpointtest holds the end-to-end tests of VDL's failpoints
// (docs/failpoints.md) and of the production build guarantee. It has no
// code of its own; everything is in its _test.go files:
//
//   - harness_test.go builds ./cmd/vdl twice per test binary (the failpoint
//     build with scripts/build-failpoint.sh, and the production build) and
//     runs clusters of three `vdl server` processes on 127.0.0.1 with
//     internal/proccluster (shared with the integration tests); it adds the
//     failpoint controls, a produce-probing leader wait and the ledger of
//     acknowledged writes.
//   - failpoints_test.go enables every registered failpoint over the admin
//     HTTP (failpoints.Client) on a running failpoint build and observes its
//     documented effect: crashes (SIGKILL, restart, no acknowledged write
//     lost), injected I/O errors (the server stops accepting writes),
//     partitions (a follower stops receiving, then catches up), delays.
//   - production_test.go proves the production binary has no control plane
//     (404) and no failpoint name.
//   - bench_test.go compares the produce throughput of the production binary
//     built from the work tree with one built from git HEAD (make
//     bench-failpoints).
//
// go test ./failpointtest/ runs everything (a few minutes); -short skips
// the slowest cases.
package failpointtest
