package storage

import (
	"fmt"
	"path/filepath"
	"testing"

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
	for _, fsys := range []vfs.FS{vfs.OS{}, vfs.NewMem()} {
		dir := "/data/chunk"
		if _, ok := fsys.(vfs.OS); ok {
			dir = filepath.Join(t.TempDir(), "chunk")
		}
		opts := Options{FS: fsys, Dir: dir, Stream: 7, SegmentSize: 4 << 20, TailCacheBytes: 16 << 20}
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
		end := l.EndOffset()
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
// append: no zeroing of the chunk before the copy.
func BenchmarkWriteChunk(b *testing.B) {
	for _, c := range []struct{ size, per int }{{mib, 1}, {4 << 10, 256}} {
		b.Run(fmt.Sprintf("entry=%dK", c.size>>10), func(b *testing.B) {
			l, err := Open(Options{FS: discardFS{vfs.NewMem()}, Dir: "/d", Stream: 1, SegmentSize: 1 << 30, TailCacheBytes: 8 * mib})
			require.NoError(b, err)
			defer l.Close()
			ents := groupEntries(c.per, userPayload(c.size))
			idx := uint64(1)
			b.SetBytes(int64(c.size * c.per))
			b.ReportAllocs()
			for b.Loop() {
				renumber(ents, &idx)
				if err := l.Write(ents, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
