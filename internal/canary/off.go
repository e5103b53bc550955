//go:build !vdlcanary

package canary

// Enabled: this build cannot switch canaries on.
const Enabled = false

// On reports whether canary n is switched on: never in this build.
func On(Name) bool { return false }

// Set panics: only a vdlcanary build can switch canaries on.
func Set(Name) { panic("canary: build with -tags vdlcanary to switch canaries on") }
