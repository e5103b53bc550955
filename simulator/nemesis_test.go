package simulator

import (
	"slices"
	"testing"
)

// TestFaultTable: every fault has a name and an injector, and the table is
// in draw order (the default faults by name, then the opt-in ones): a
// reordered table would replay every seed differently.
func TestFaultTable(t *testing.T) {
	var defaults, optIn []string
	for f := range numFaults {
		if f.String() == "" || faults[f].inject == nil || faults[f].weight <= 0 {
			t.Errorf("fault %d: name %q, weight %d, inject set %v", f, f.String(), faults[f].weight, faults[f].inject != nil)
		}
		if faults[f].corruption {
			optIn = append(optIn, f.String())
		} else if len(optIn) > 0 {
			t.Errorf("%s comes after an opt-in fault", f)
		} else {
			defaults = append(defaults, f.String())
		}
	}
	if !slices.IsSorted(defaults) || !slices.IsSorted(optIn) {
		t.Errorf("the table is not in draw order: %v then %v", defaults, optIn)
	}
	if !slices.Equal(FaultKinds(), defaults) {
		t.Errorf("FaultKinds() = %v, want %v", FaultKinds(), defaults)
	}
}
