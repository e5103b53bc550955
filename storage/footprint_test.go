package storage

import (
	"path"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// maxEmptyStreamBytes is the disk a freshly bootstrapped stream may take
// on each server (docs/operations.md, Sizing).
const maxEmptyStreamBytes = 256 << 10

// memDirBytes sums the sizes of dir's files (Mem allocates a file's size).
func memDirBytes(t *testing.T, mem *vfs.Mem, dir string) int64 {
	t.Helper()
	names, err := mem.List(dir)
	require.NoError(t, err)
	var total int64
	for _, n := range names {
		size, err := mem.Stat(path.Join(dir, n))
		require.NoError(t, err)
		t.Logf("%s: %d bytes", n, size)
		total += size
	}
	return total
}

// An empty stream takes a first allocation of disk, not a whole segment:
// 100 empty streams used to take 6.4 GB on each server. Reopening it (a
// restart) does not grow it either.
func TestEmptyStreamFootprint(t *testing.T) {
	mem := vfs.NewMem()
	opts := Options{FS: mem, Dir: "/data/s1", Stream: 7} // the default segment size
	l := openMem(t, opts)
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	require.NoError(t, l.Close())
	require.LessOrEqual(t, memDirBytes(t, mem, opts.Dir), int64(maxEmptyStreamBytes))

	l = openMem(t, opts)
	require.NoError(t, l.Close())
	require.LessOrEqual(t, memDirBytes(t, mem, opts.Dir), int64(maxEmptyStreamBytes))
}

// A stream restarted with its active segment preallocated whole (written
// before allocation steps, or a busy stream's) gives the room its records
// do not need back: an upgrade frees what empty streams held.
func TestRecoveryGivesBackUnusedAllocation(t *testing.T) {
	mem := vfs.NewMem()
	opts := Options{FS: mem, Dir: "/data/s1", Stream: 7}
	l := openMem(t, opts)
	require.NoError(t, l.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}))
	next := writeUser(t, l, 2, 10, 1000)
	seg := l.active().base + ".seg"
	require.NoError(t, l.Close())
	f, err := mem.Open(seg)
	require.NoError(t, err)
	require.NoError(t, f.Allocate(defaultSegmentSize)) // as segments were
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	l = openMem(t, opts)
	require.LessOrEqual(t, memDirBytes(t, mem, opts.Dir), int64(maxEmptyStreamBytes))
	end := writeUser(t, l, next, 200, 1000) // grows again
	require.NoError(t, l.Close())
	mem.CrashClean()
	l = openMem(t, opts)
	defer l.Close()
	got, err := l.Entries(2, end, 1<<30)
	require.NoError(t, err)
	require.Len(t, got, int(end-2))
}

// writeUser appends and syncs n user entries of about size bytes from
// index next on, and returns the next index.
func writeUser(t *testing.T, l *Log, next uint64, n, size int) uint64 {
	t.Helper()
	var ents []*pb.Entry
	for range n {
		ents = append(ents, userEnt(next, 1, 1, size, 1))
		next++
	}
	require.NoError(t, l.Write(ents, nil))
	_, err := l.Sync()
	require.NoError(t, err)
	return next
}

// A segment's file grows ahead of its records in steps, and the
// segment still rolls at SegmentSize of records; the next segment starts
// whole (the stream is busy); what was synced survives a crash, and
// writing goes on after it.
func TestSegmentGrowsWithData(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 1 << 20
	l := openMem(t, opts)
	act := l.active()
	require.Equal(t, l.firstAllocation(), act.allocated, "a new segment holds its first step")
	sizes := []int64{act.allocated}
	next := uint64(1)
	for len(l.segs) == 1 {
		next = writeUser(t, l, next, 4, 1000)
		size, err := act.f.Size()
		require.NoError(t, err)
		require.Equal(t, act.allocated, size)
		require.GreaterOrEqual(t, size, act.end, "the file holds every record")
		if size != sizes[len(sizes)-1] {
			sizes = append(sizes, size)
		}
	}
	require.Equal(t, []int64{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20}, sizes)
	require.Greater(t, act.end, opts.SegmentSize-5000, "rolled when full, not when its file was")
	require.Equal(t, opts.SegmentSize, l.active().allocated, "the next segment starts where this one ended")
	require.NoError(t, l.Close())

	mem.CrashClean()
	l = openMem(t, opts)
	defer l.Close()
	require.Equal(t, next-1, l.active().last)
	end := writeUser(t, l, next, 9, 1000)
	got, err := l.Entries(1, end, 1<<30)
	require.NoError(t, err)
	require.Len(t, got, int(end-1))
}

// A growth step that finds the disk full is a roll that finds it full:
// the space reserve is given up and the write goes on; with no reserve
// left the next step fails the log, as any failed write does.
func TestGrowthOnFullDiskGivesUpTheReserve(t *testing.T) {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/data"))
	space := NewSpace(mem, "/data", 1<<20)
	require.False(t, space.Check(), "ballast created")
	opts := memOpts(mem)
	opts.SegmentSize, opts.Space = 4<<20, space
	l := openMem(t, opts)
	defer l.Close()
	mem.SetCapacity(1 << 40)
	free, err := mem.FreeSpace("/data")
	require.NoError(t, err)
	mem.SetCapacity(1<<40 - int64(free) + 8<<10) // the first step is made; the next finds no room

	next := writeUser(t, l, 1, 150, 1000) // past the first step
	require.True(t, space.Check(), "the reserve was given up")
	require.Greater(t, l.active().allocated, l.firstAllocation())

	var werr error
	for i := 0; i < 2000 && werr == nil; i++ {
		werr = l.Write([]*pb.Entry{userEnt(next, 1, 1, 1000, 1)}, nil)
		next++
	}
	require.ErrorIs(t, werr, vfs.ErrNoSpace)
	require.ErrorIs(t, l.Write([]*pb.Entry{userEnt(next, 1, 1, 1000, 1)}, nil), vfs.ErrNoSpace, "the log is failed")
}
