package configserver

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// ReleasedFormers releases a former replica only once its copy is gone
// and no replica (nor another former one) can count it.
func TestReleasedFormers(t *testing.T) {
	st := Stream{Name: "s", Group: 9, Replicas: []uint64{1, 4, 3}, Former: []uint64{2}, State: StreamActive}
	without := func() GroupView { return GroupView{Heard: true, Hosts: true, Members: []uint64{1, 3, 4}} }
	views := func() map[uint64]GroupView {
		return map[uint64]GroupView{1: without(), 3: without(), 4: without(), 2: {Heard: true}}
	}
	require.Equal(t, []uint64{2}, ReleasedFormers(st, false, views()))
	require.Empty(t, ReleasedFormers(st, true, views()), "not during a move")

	for name, change := range map[string]func(map[uint64]GroupView){
		"its copy is still there":              func(v map[uint64]GroupView) { v[2] = GroupView{Heard: true, Hosts: true, Members: []uint64{1, 3, 4}} },
		"it was not heard from":                func(v map[uint64]GroupView) { delete(v, 2) },
		"a replica was not heard from":         func(v map[uint64]GroupView) { v[3] = GroupView{} },
		"a replica still counts it":            func(v map[uint64]GroupView) { v[3] = GroupView{Heard: true, Hosts: true, Members: []uint64{1, 2, 3}} },
		"a replica does not host it yet":       func(v map[uint64]GroupView) { v[4] = GroupView{Heard: true} },
		"another server's membership has it":   func(v map[uint64]GroupView) { v[7] = GroupView{Heard: true, Hosts: true, Members: []uint64{2, 3}} },
		"a stale report of another server has": func(v map[uint64]GroupView) { v[7] = GroupView{Hosts: true, Members: []uint64{2}} },
	} {
		v := views()
		change(v)
		require.Empty(t, ReleasedFormers(st, false, v), name)
	}

	// Another former replica: released once heard without a copy, or
	// with a membership without it.
	st.Former = []uint64{2, 5}
	v := views()
	require.Equal(t, []uint64(nil), ReleasedFormers(st, false, v), "5 not heard from: neither is released")
	v[5] = GroupView{Heard: true, Hosts: true, Members: []uint64{1, 2, 3}}
	require.Empty(t, ReleasedFormers(st, false, v), "5 still counts 2, and holds a copy")
	v[5] = GroupView{Heard: true}
	require.Equal(t, []uint64{2, 5}, ReleasedFormers(st, false, v))
}
