package simulator

import (
	"strings"

	"github.com/vdl-project/vdl/checker"
)

// A check is one thing a run asserts. Every failure names the check that
// found it (Result.Caught), so a canary is held to the check it targets,
// not to whatever happens to go wrong after it.
type check string

const (
	checkHarness      check = "harness"      // the simulator itself could not do what it meant to
	checkProtocol     check = "protocol"     // an undecodable or unexpected Kafka response
	checkPanic        check = "panic"        // a process panicked
	checkRestart      check = "restart"      // a process could not restart on its disk
	checkDurability   check = "durability"   // a restart lost what raft was told is durable
	checkRetention    check = "retention"    // retention above the high watermark, or past it
	checkHWM          check = "hwm"          // a high watermark went back within a term
	checkLiveness     check = "liveness"     // no progress or no convergence after the heal
	checkFinalRead    check = "final-read"   // the final read did not complete
	checkReplicaRead  check = "replica-read" // a replica's committed records could not be read
	checkCorruption   check = "corruption"   // corruption reported where none was injected
	checkWatchdog     check = "watchdog"     // a seed ran past its wall-clock or event limits
	checkLinearizable check = "linearizability"
	checkConvergence  check = "convergence"
	checkHistory      check = "history" // the recorded history is malformed
	// The checker's anomalies and ordering violations are "anomaly:<kind>"
	// and "ordering:<kind>".
)

// checkerCheck names the check behind one of the checker's stream failures.
func checkerCheck(sr *checker.StreamResult, failure string) check {
	switch {
	case strings.HasPrefix(failure, "not linearizable"), strings.HasPrefix(failure, "porcupine"):
		return checkLinearizable
	case strings.HasPrefix(failure, "replicas diverge"):
		return checkConvergence
	case strings.Contains(failure, "same-connection ordering"):
		return "ordering"
	}
	for k := range sr.Anomalies {
		if strings.HasSuffix(failure, " "+string(k)) {
			return check("anomaly:" + string(k))
		}
	}
	return "checker"
}
