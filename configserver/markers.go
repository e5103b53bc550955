package configserver

import (
	"github.com/pingcap/failpoint"

	"github.com/vdl-project/vdl/failpoints"
)

// The failpoint markers (failpoints.go registers them): empty until the
// failpoint build rewrites them.

func fpBeforePropose() {
	failpoint.Inject("beforePropose", func(val failpoint.Value) {
		failpoints.Hit("configserver/beforePropose")
		failpoints.CrashOn(val)
	})
}

func fpAfterPropose() {
	failpoint.Inject("afterPropose", func(val failpoint.Value) {
		failpoints.Hit("configserver/afterPropose")
		failpoints.CrashOn(val)
	})
}

func fpBeforeTransfer() {
	failpoint.Inject("beforeTransfer", func(val failpoint.Value) {
		failpoints.Hit("configserver/beforeTransfer")
		failpoints.CrashOn(val)
	})
}

func fpBeforeReportAnswer() {
	failpoint.Inject("beforeReportAnswer", func(val failpoint.Value) {
		failpoints.Hit("configserver/beforeReportAnswer")
		failpoints.CrashOn(val)
	})
}
