package storage

import (
	"encoding/binary"
	"path"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/vfs"
)

// kbatch builds a minimal Kafka RecordBatch v2 taking n offsets, with
// body filler bytes and the given maxTimestamp. baseOffset is left 0.
func kbatch(n int, body int, maxTs int64) []byte {
	b := make([]byte, batchfmt.HeaderSize+body)
	binary.BigEndian.PutUint32(b[batchfmt.OffBatchLength:], uint32(len(b)-12))
	b[batchfmt.OffMagic] = 2
	binary.BigEndian.PutUint32(b[batchfmt.OffLastOffsetDelta:], uint32(n-1))
	binary.BigEndian.PutUint64(b[27:], uint64(maxTs)) // firstTimestamp
	binary.BigEndian.PutUint64(b[batchfmt.OffMaxTimestamp:], uint64(maxTs))
	binary.BigEndian.PutUint32(b[57:], uint32(n))
	for i := range body {
		b[batchfmt.HeaderSize+i] = byte(i*7 + n)
	}
	return b
}

// userData is a TagUser payload of the given batches.
func userData(batches ...[]byte) []byte {
	d := []byte{TagUser}
	for _, b := range batches {
		d = append(d, b...)
	}
	return d
}

func ent(index, term uint64, data []byte) *pb.Entry {
	return &pb.Entry{Term: new(term), Index: new(index), Type: pb.EntryNormal.Enum(), Data: data}
}

func userEnt(index, term uint64, n, body int, ts int64) *pb.Entry {
	return ent(index, term, userData(kbatch(n, body, ts)))
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func memOpts(fs vfs.FS) Options {
	return Options{FS: fs, Dir: "/data/s1", Stream: 7, SegmentSize: 64 << 10, TailCacheBytes: 1 << 20}
}

func openMem(t *testing.T, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	require.NoError(t, err)
	return l
}

// countFS counts reads of segment files, to prove cache hits, and the
// handles of segment and index files open, to prove the file cache's bound.
type countFS struct {
	vfs.FS
	reads     atomic.Int64
	readBytes atomic.Int64
	// directReads counts the reads past the page cache (ReadDirect).
	directReads atomic.Int64

	mu   sync.Mutex
	open int // .seg, .ridx and .lidx handles open now
	peak int // the most open at once
}

func (c *countFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return c.track(f), nil
}

func (c *countFS) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return c.track(f), nil
}

func (c *countFS) track(f vfs.File) *countFile {
	cf := &countFile{File: f, c: c}
	switch path.Ext(f.Name()) {
	case ".seg", ".ridx", ".lidx":
		cf.segFile = true
		c.mu.Lock()
		c.open++
		c.peak = max(c.peak, c.open)
		c.mu.Unlock()
	}
	return cf
}

// handles returns the segment and index file handles open now and the
// most open at once since the last call, which restarts the peak.
func (c *countFS) handles() (open, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	open, peak = c.open, c.peak
	c.peak = c.open
	return open, peak
}

type countFile struct {
	vfs.File
	c       *countFS
	segFile bool
	closed  atomic.Bool
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.c.reads.Add(1)
	n, err := f.File.ReadAt(p, off)
	f.c.readBytes.Add(int64(n))
	return n, err
}

func (f *countFile) ReadDirect(p []byte, off int64) (int, error) {
	f.c.reads.Add(1)
	f.c.directReads.Add(1)
	n, err := f.File.ReadDirect(p, off)
	f.c.readBytes.Add(int64(n))
	return n, err
}

// DataAfter is the file's, or all of it is data.
func (f *countFile) DataAfter(off int64) (int64, int64, bool, error) {
	if m, ok := f.File.(vfs.DataMap); ok {
		return m.DataAfter(off)
	}
	size, err := f.File.Size()
	return off, size, off < size, err
}

func (f *countFile) Close() error {
	if f.segFile && !f.closed.Swap(true) {
		f.c.mu.Lock()
		f.c.open--
		f.c.mu.Unlock()
	}
	return f.File.Close()
}

// stampedBaseOffsets returns the baseOffset of each batch in data.
func stampedBaseOffsets(data []byte) []int64 {
	var out []int64
	for p := 0; p < len(data); {
		out = append(out, int64(binary.BigEndian.Uint64(data[p:])))
		p += 12 + int(int32(binary.BigEndian.Uint32(data[p+batchfmt.OffBatchLength:])))
	}
	return out
}
