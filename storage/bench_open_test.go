package storage

import (
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// BenchmarkOpenIdle opens the log of an idle stream (bootstrapped, a few
// entries, its first segment's small allocation): what a restart does
// 10,000 times at 10,000 streams (docs/operations.md, Sizing). Recovery
// scans the active segment and the zeros after its last record; the scan
// windows are pooled, so allocations stay small (B/op).
func BenchmarkOpenIdle(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "s")
	opts := Options{FS: vfs.OS{}, Dir: dir, Stream: 1}
	l, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		b.Fatal(err)
	}
	next := uint64(2)
	ents := groupEntries(3, userPayload(1024))
	renumber(ents, &next)
	if err := l.Write(ents, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
