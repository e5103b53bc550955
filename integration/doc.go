// Package integration runs real VDL clusters — three `vdl server` processes on
// 127.0.0.1, built from ./cmd/vdl once per test binary — against unmodified
// Kafka clients (franz-go, sarama, segmentio/kafka-go, kcat), kills nodes with
// SIGKILL, checks the recorded histories with the checker package, and holds
// the end-to-end benchmark (BenchmarkE2E, `make bench-e2e`; method and
// figures in docs/performance.md).
//
// The package has tests only; the cluster harness is internal/proccluster
// (harness_test.go wires it in).
package integration
