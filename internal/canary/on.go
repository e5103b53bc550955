//go:build vdlcanary

package canary

import "os"

// Enabled: this build can switch canaries on (tests only).
const Enabled = true

var active Name

// A process of a vdlcanary build runs the canary VDL_CANARY names (the
// real-process canary tests start servers so).
func init() {
	if n := os.Getenv("VDL_CANARY"); n != "" {
		active = Name(n)
	}
}

// On reports whether canary n is switched on.
func On(n Name) bool { return n != None && active == n }

// Set switches canary n on (None: all off). Not safe for concurrent use:
// the simulator runs one world at a time.
func Set(n Name) { active = n }
