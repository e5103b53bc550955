package storage

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/vdl-project/vdl/vfs"
)

// One write of records large and small (pieces of their own and runs of
// shared ones, the state record last) lands on the disk as one buffer
// would have: after a reopen, whose recovery checks every record's CRC and
// chain, the entries and the Kafka reads from the files equal those the
// tail cache gave before, and nothing was cut.
func TestChunkOfOwnAndSharedPieces(t *testing.T) {
	for _, opts := range onBothFS(t) {
		l := openMem(t, opts)
		bodies := []int{100, 40000, 200, 300, 70000, 10, ownPieceMin, ownPieceMin - 100}
		var ents []*pb.Entry
		for k, b := range bodies {
			ents = append(ents, userEnt(uint64(k+1), 1, 1+k%3, b, int64(k)))
		}
		require.NoError(t, l.Write(ents, hardState(1, 1, uint64(len(ents)))))
		_, err := l.Sync()
		require.NoError(t, err)
		last := uint64(len(ents))
		cached, err := l.Entries(1, last+1, 1<<30)
		require.NoError(t, err)
		requireSameFromDisk(t, l, opts, cached)
	}
}

// A new leader's entries overwrite a follower's conflicting suffix,
// stamped from where the log matching puts them: after the truncation the
// storage counts the same offsets, and stores them uncopied too.
func TestStampedEntriesAfterATruncation(t *testing.T) {
	for _, opts := range onBothFS(t) {
		l := openMem(t, opts)
		stampedEnt := func(index, term uint64, offsets int, base int64) *pb.Entry {
			e := userEnt(index, term, offsets, 40000, int64(index))
			StampBatches(e.Data[1:], base, term)
			return e
		}
		// Term 1: entries 1-3 take [0, 2), [2, 4), [4, 6).
		first := []*pb.Entry{stampedEnt(1, 1, 2, 0), stampedEnt(2, 1, 2, 2), stampedEnt(3, 1, 2, 4)}
		require.NoError(t, l.Write(first, hardState(1, 1, 2)))
		// Term 2's leader had only entries 1-2: its entries 3-4 take [4, 7), [7, 8).
		second := []*pb.Entry{stampedEnt(3, 2, 3, 4), stampedEnt(4, 2, 1, 7)}
		require.NoError(t, l.Write(second, hardState(2, 2, 4)))
		_, err := l.Sync()
		require.NoError(t, err)

		var borrowed int64
		for _, e := range append(first, second...) {
			borrowed += int64(len(e.Data) - 1)
		}
		require.Equal(t, borrowed, l.Stats().BytesBorrowed, "every entry stored uncopied")
		cached, err := l.Entries(1, 5, 1<<30)
		require.NoError(t, err)
		want := []*pb.Entry{first[0], first[1], second[0], second[1]}
		for k := range want {
			require.True(t, proto.Equal(want[k], cached[k]), "entry %d", k+1)
		}
		bs, err := l.Read(0, 8, 1<<30)
		require.NoError(t, err)
		var bases []int64
		for _, b := range bs {
			bases = append(bases, stampedBaseOffsets(b.Data)...)
		}
		require.Equal(t, []int64{0, 2, 4, 7}, bases)
		requireSameFromDisk(t, l, opts, cached)
	}
}

// onBothFS are a log's options on the OS's file system (a temporary
// directory) and in memory.
func onBothFS(t *testing.T) []Options {
	opts := Options{FS: vfs.NewMem(), Dir: "/data/log", Stream: 7, SegmentSize: 4 << 20, TailCacheBytes: 16 << 20}
	onDisk := opts
	onDisk.FS, onDisk.Dir = vfs.OS{}, filepath.Join(t.TempDir(), "log")
	return []Options{onDisk, opts}
}

// requireSameFromDisk closes l and opens it again (recovery checks every
// record's CRC and chain): every record is kept, and the entries and Kafka
// reads from the files equal those the tail cache gave before.
func requireSameFromDisk(t *testing.T, l *Log, opts Options, cached []*pb.Entry) {
	t.Helper()
	last, end := uint64(len(cached)), l.EndOffset()
	fromCache, err := l.Read(0, end, 1<<30)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	l = openMem(t, opts)
	got, err := l.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last, got, "recovery kept every record")
	require.Equal(t, end, l.EndOffset())
	fromDisk, err := l.Entries(1, last+1, 1<<30)
	require.NoError(t, err)
	require.Len(t, fromDisk, len(cached))
	for k := range cached {
		require.True(t, proto.Equal(cached[k], fromDisk[k]), "entry %d", k+1)
	}
	read, err := l.Read(0, end, 1<<30)
	require.NoError(t, err)
	require.Equal(t, len(fromCache), len(read))
	for k := range read {
		require.Equal(t, fromCache[k].Data, read[k].Data, "batch %d", k)
	}
	require.NoError(t, l.Close())
}

// A large user entry whose batches carry the stamps the storage would
// write (a leader stamps what it proposes) is written and cached as the
// caller's bytes, uncopied; one stamped wrong, or not at all, is copied and
// stamped right, the caller's bytes left as they were; small ones share
// the chunk's buffer whatever their stamps. After a reopen (every record's
// CRC and chain checked) the disk gives back what the cache gave.
func TestStampedEntriesAreWrittenUncopied(t *testing.T) {
	for _, opts := range onBothFS(t) {
		l := openMem(t, opts)
		type item struct {
			body, offsets int
			stamp         int64 // the base stamped before the write; -1: none
			borrowed      bool
		}
		items := []item{ // the entries' offsets: [0, 2), [2, 5), [5, 6), [6, 10), [10, 11), [11, 13)
			{body: 40000, offsets: 2, stamp: 0, borrowed: true},
			{body: 70000, offsets: 3, stamp: 3}, // off by one
			{body: 200, offsets: 1, stamp: 5},   // small: shared
			{body: ownPieceMin, offsets: 4, stamp: 6, borrowed: true},
			{body: 70000, offsets: 1, stamp: -1},
			{body: 50000, offsets: 2, stamp: 11, borrowed: true},
		}
		var ents, before []*pb.Entry
		var borrowed int64
		for k, it := range items {
			e := userEnt(uint64(k+1), 2, it.offsets, it.body, int64(k))
			if it.stamp >= 0 {
				StampBatches(e.Data[1:], it.stamp, 2)
			}
			if it.borrowed {
				borrowed += int64(len(e.Data) - 1)
			}
			ents, before = append(ents, e), append(before, proto.Clone(e).(*pb.Entry))
		}
		require.NoError(t, l.Write(ents, hardState(2, 1, uint64(len(ents)))))
		_, err := l.Sync()
		require.NoError(t, err)
		require.Equal(t, borrowed, l.Stats().BytesBorrowed)
		last := uint64(len(ents))
		cached, err := l.Entries(1, last+1, 1<<30)
		require.NoError(t, err)
		next := int64(0)
		for k, it := range items {
			require.True(t, proto.Equal(before[k], ents[k]), "entry %d: the caller's bytes unchanged", k+1)
			require.Equal(t, it.borrowed, unsafe.SliceData(cached[k].Data) == unsafe.SliceData(ents[k].Data),
				"entry %d: the cache holds the caller's bytes", k+1)
			want := bytes.Clone(ents[k].Data)
			StampBatches(want[1:], next, 2)
			require.Equal(t, want, cached[k].Data, "entry %d stored stamped", k+1)
			next += int64(it.offsets)
		}
		require.Equal(t, next, l.EndOffset())
		requireSameFromDisk(t, l, opts, cached)
	}
}

// discardFS is the in-memory FS whose segment writes go nowhere: what a
// write costs the engine itself (encoding, copies, allocation).
type discardFS struct{ vfs.FS }

func (d discardFS) Create(name string) (vfs.File, error) {
	f, err := d.FS.Create(name)
	return discardFile{f}, err
}

func (d discardFS) Open(name string) (vfs.File, error) {
	f, err := d.FS.Open(name)
	return discardFile{f}, err
}

type discardFile struct{ vfs.File }

func (f discardFile) WriteAtv(bufs [][]byte, off int64) error {
	if filepath.Ext(f.Name()) == ".seg" && off > 0 {
		return nil
	}
	return vfs.WriteAtv(f.File, bufs, off)
}

func (f discardFile) Allocate(size int64) error {
	if filepath.Ext(f.Name()) == ".seg" {
		return nil
	}
	return f.File.Allocate(size)
}

func (f discardFile) WriteAt(p []byte, off int64) (int, error) {
	if filepath.Ext(f.Name()) == ".seg" && off > 0 {
		return len(p), nil
	}
	return f.File.WriteAt(p, off)
}

// BenchmarkWriteChunk: the engine's CPU per write of entries of 1 MiB
// (one per write, as a produce is) and 4 KiB (256 per write), segment
// writes discarded. A 1 MiB record is a piece of its own, filled by
// append: no zeroing of the chunk before the copy; stamped (as a leader
// proposes it), it is the entry's own bytes: no copy, no allocation.
func BenchmarkWriteChunk(b *testing.B) {
	for _, c := range []struct {
		size, per int
		stamped   bool
	}{{mib, 1, false}, {mib, 1, true}, {4 << 10, 256, false}} {
		name := fmt.Sprintf("entry=%dK", c.size>>10)
		if c.stamped {
			name += "/stamped"
		}
		b.Run(name, func(b *testing.B) {
			l, err := Open(Options{FS: discardFS{vfs.NewMem()}, Dir: "/d", Stream: 1, SegmentSize: 1 << 30, TailCacheBytes: 8 * mib})
			require.NoError(b, err)
			defer l.Close()
			ents := groupEntries(c.per, userPayload(c.size))
			idx := uint64(1)
			b.SetBytes(int64(c.size * c.per))
			b.ReportAllocs()
			for b.Loop() {
				renumber(ents, &idx)
				if c.stamped {
					// The same bytes stamped again for the next write: only
					// the discarded segments and the unread cache hold them.
					StampBatches(ents[0].Data[1:], int64(idx-2), 1)
				}
				if err := l.Write(ents, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
