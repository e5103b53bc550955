//go:build failpoint

package fptest

import "github.com/vdl-project/vdl/failpoints"

func init() {
	failpoints.Register(
		failpoints.Def{
			Name:   "failpoints/internal/fptest/demoIOError",
			Place:  "fptest.Write, before the write",
			Effect: "return(true): Write returns the injected EIO",
		},
		failpoints.Def{
			Name:   "failpoints/internal/fptest/demoCrash",
			Place:  "fptest.MaybeCrash",
			Effect: "return(true): the process dies by SIGKILL",
		},
		failpoints.Def{
			Name:   "failpoints/internal/fptest/demoBeforeStep",
			Place:  "fptest.Step, before the step",
			Effect: "pause: the step waits until re-enabled or disabled; sleep(ms): delays it",
		},
	)
}
