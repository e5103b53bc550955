package storage

import (
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// kbatch builds a minimal Kafka RecordBatch v2 taking n offsets, with
// body filler bytes and the given maxTimestamp. baseOffset is left 0.
func kbatch(n int, body int, maxTs int64) []byte {
	b := make([]byte, kbHeaderSize+body)
	binary.BigEndian.PutUint32(b[kbLength:], uint32(len(b)-12))
	b[kbMagic] = 2
	binary.BigEndian.PutUint32(b[kbLastOffsetDelta:], uint32(n-1))
	binary.BigEndian.PutUint64(b[27:], uint64(maxTs)) // firstTimestamp
	binary.BigEndian.PutUint64(b[kbMaxTimestamp:], uint64(maxTs))
	binary.BigEndian.PutUint32(b[57:], uint32(n))
	for i := range body {
		b[kbHeaderSize+i] = byte(i*7 + n)
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

// countFS counts reads of segment files, to prove cache hits.
type countFS struct {
	vfs.FS
	reads atomic.Int64
}

func (c *countFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, c: c}, nil
}

func (c *countFS) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, c: c}, nil
}

type countFile struct {
	vfs.File
	c *countFS
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.c.reads.Add(1)
	return f.File.ReadAt(p, off)
}

// stampedBaseOffsets returns the baseOffset of each batch in data.
func stampedBaseOffsets(data []byte) []int64 {
	var out []int64
	for p := 0; p < len(data); {
		out = append(out, int64(binary.BigEndian.Uint64(data[p:])))
		p += 12 + int(int32(binary.BigEndian.Uint32(data[p+kbLength:])))
	}
	return out
}
