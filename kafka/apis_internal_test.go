package kafka

import "testing"

// Every API is registered once, and every version a profile can advertise
// has a request shape (checkShape refuses the others).
func TestAPIRegistrations(t *testing.T) {
	seen := map[int16]bool{}
	for _, a := range apis {
		k := a.key.Int16()
		if seen[k] {
			t.Errorf("%s registered twice", a.key.Name())
		}
		seen[k] = true
		if a.handle == nil || a.shape == nil {
			t.Errorf("%s lacks a handler or a shape", a.key.Name())
		}
		for _, vs := range []versions{a.modern, a.kafka0102} {
			if vs.served && (vs.min > vs.max || vs.max > a.shapeMax) {
				t.Errorf("%s serves v%d–v%d, shapes known up to v%d", a.key.Name(), vs.min, vs.max, a.shapeMax)
			}
		}
	}
}
