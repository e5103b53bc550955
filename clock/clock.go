// Package clock is the time edge of VDL. Drivers read time through Clock;
// the deterministic core never reads time at all, it is handed ticks.
package clock

import "time"

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Manual is a clock that moves only when told to; tests and the simulator
// own it. It is not safe for concurrent use.
type Manual struct{ now time.Time }

// NewManual returns a manual clock set to start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the manual time.
func (m *Manual) Now() time.Time { return m.now }

// Advance moves the clock forward by d.
func (m *Manual) Advance(d time.Duration) { m.now = m.now.Add(d) }

// Set moves the clock to t.
func (m *Manual) Set(t time.Time) { m.now = t }
