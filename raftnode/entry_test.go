package raftnode

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/storage"
)

// A user entry's payload is the tag and the batches, a copy of them.
func TestUserData(t *testing.T) {
	batches := []byte{1, 2, 3}
	d := UserData(batches)
	require.Equal(t, []byte{storage.TagUser, 1, 2, 3}, d)
	batches[0] = 9
	require.Equal(t, byte(1), d[1], "a copy")
	require.Equal(t, []byte{storage.TagUser}, UserData(nil))
}

// BenchmarkUserData: the proposal payload of a 1 MiB produce, one copy
// and no zeroing of what it copies.
func BenchmarkUserData(b *testing.B) {
	batches := make([]byte, 1<<20)
	b.SetBytes(int64(len(batches)))
	b.ReportAllocs()
	for b.Loop() {
		if d := UserData(batches); len(d) != 1+len(batches) || d[0] != storage.TagUser {
			b.Fatal("bad payload")
		}
	}
}
