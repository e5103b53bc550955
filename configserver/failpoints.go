//go:build failpoint

package configserver

import "github.com/vdl-project/vdl/failpoints"

// The config servers' failpoints (docs/failpoints.md), on their API under
// /debug/failpoints.
func init() {
	failpoints.Register(
		failpoints.Def{
			Name:   "configserver/beforePropose",
			Place:  "configserver/applier.go (*Service).propose: before a command goes to Raft",
			Effect: "return(true): crash (SIGKILL) with the command not proposed; sleep(ms): delay it",
		},
		failpoints.Def{
			Name:   "configserver/afterPropose",
			Place:  "configserver/applier.go (*Service).propose: after the command committed, before it is applied and answered",
			Effect: "return(true): crash with the command committed but its caller unanswered; sleep(ms): delay the answer",
		},
		failpoints.Def{
			Name:   "configserver/beforeTransfer",
			Place:  "configserver/balancer.go (*Service).balance: before the balancer asks a stream's leader for a transfer",
			Effect: "return(true): crash; sleep(ms): delay the transfer (and the balancer round)",
		},
		failpoints.Def{
			Name:   "configserver/beforeReportAnswer",
			Place:  "configserver/reports.go (*Service).handleReport: before a server's report is answered with its assignment",
			Effect: "return(true): crash; sleep(ms): delay the answer",
		},
	)
}
