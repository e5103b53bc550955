//go:build failpoint

package kafka

import "github.com/vdl-project/vdl/failpoints"

// The Kafka TCP driver's failpoints (docs/failpoints.md).
func init() {
	failpoints.Register(
		failpoints.Def{
			Name:   "kafka/afterCommitBeforeResponse",
			Place:  "kafka/server.go (*conn).loop: produce completions (committed and applied) handed to the session, before the responses are written",
			Effect: "return(true): crash with the write committed but not acknowledged; sleep(ms): delay the produce responses of the connection",
		},
		failpoints.Def{
			Name:   "kafka/beforeRequest",
			Place:  "kafka/server.go (*conn).loop: a request frame read, before the session handles it",
			Effect: "return(true): close the connection instead (the client sees it dropped); sleep(ms): delay every request",
		},
	)
}
