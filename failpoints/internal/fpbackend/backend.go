// Package fpbackend adapts github.com/pingcap/failpoint to the failpoints
// registry. Only the failpoint build (and tests) import it, so a production
// binary links the library only through the no-op markers.
package fpbackend

import (
	"fmt"

	"github.com/pingcap/failpoint"
)

// Lib is the process-wide failpoint library.
type Lib struct{}

// Parse checks a term's syntax on a scratch failpoint. The library's parser
// panics on some malformed values (`return(true`): that is an error too.
func (Lib) Parse(term string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("failpoint: cannot parse %q: %v", term, p)
		}
	}()
	var fp failpoint.Failpoint
	if err := fp.Enable(term); err != nil {
		return err
	}
	fp.Disable()
	return nil
}

// Enable disables full, which closes the channel that goroutines paused in
// it wait on, then enables it. The library's Enable alone would block on the
// failpoint's lock that the paused goroutines hold: a deadlock. enabled runs
// while the library still holds that lock, before any evaluation.
func (Lib) Enable(full, term string, enabled func()) error {
	_ = failpoint.Disable(full) // ErrNotExist if never enabled: fine
	return failpoint.EnableWith(full, term, func() error {
		if enabled != nil {
			enabled()
		}
		return nil
	})
}

// Disable disables full; a no-op if it is not enabled.
func (Lib) Disable(full string) { _ = failpoint.Disable(full) }

// Status returns full's term.
func (Lib) Status(full string) (string, bool) {
	t, err := failpoint.Status(full)
	return t, err == nil
}

// EnabledNames lists the enabled full names.
func (Lib) EnabledNames() []string {
	var out []string
	for _, n := range failpoint.List() {
		if _, err := failpoint.Status(n); err == nil {
			out = append(out, n)
		}
	}
	return out
}
