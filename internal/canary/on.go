//go:build vdlcanary

package canary

// Enabled: this build can switch canaries on (tests only).
const Enabled = true

var active Name

// On reports whether canary n is switched on.
func On(n Name) bool { return n != None && active == n }

// Set switches canary n on (None: all off). Not safe for concurrent use:
// the simulator runs one world at a time.
func Set(n Name) { active = n }
