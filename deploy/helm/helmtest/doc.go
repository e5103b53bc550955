// Package helmtest checks the Helm chart in deploy/helm/vdl with helm's own
// Go library (lint and render, no helm binary, no cluster): the rendered
// manifests are parsed into Kubernetes' API types and checked for what the
// chart promises, and every per-pod TOML it generates is loaded and
// validated by the server and config server code of this version. It is a
// package of its own so that helm's large dependency tree is compiled only
// for these tests.
package helmtest
