package storage

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// stallFS holds the preads of segment files while stalled: a catch-up read
// caught in the middle of its disk IO.
type stallFS struct {
	vfs.FS
	mu      sync.Mutex
	stalled chan struct{} // non-nil: reads of .seg files wait for it to close
	entered chan struct{} // a read is waiting
}

func (s *stallFS) stall() {
	s.mu.Lock()
	s.stalled, s.entered = make(chan struct{}), make(chan struct{}, 16)
	s.mu.Unlock()
}

func (s *stallFS) resume() {
	s.mu.Lock()
	close(s.stalled)
	s.stalled = nil
	s.mu.Unlock()
}

func (s *stallFS) Open(name string) (vfs.File, error) {
	f, err := s.FS.Open(name)
	return &stallFile{File: f, fs: s}, err
}

func (s *stallFS) Create(name string) (vfs.File, error) {
	f, err := s.FS.Create(name)
	return &stallFile{File: f, fs: s}, err
}

type stallFile struct {
	vfs.File
	fs *stallFS
}

func (f *stallFile) ReadAt(p []byte, off int64) (int, error) {
	f.stall(p)
	return f.File.ReadAt(p, off)
}

func (f *stallFile) ReadDirect(p []byte, off int64) (int, error) {
	f.stall(p)
	return f.File.ReadDirect(p, off)
}

func (f *stallFile) stall(p []byte) {
	f.fs.mu.Lock()
	st, en := f.fs.stalled, f.fs.entered
	f.fs.mu.Unlock()
	if st != nil && len(p) > 4096 { // a data read, not a header or an index
		en <- struct{}{}
		<-st
	}
}

// A catch-up read does its disk IO without the log's lock: while one is
// stuck inside its pread, the log is written and synced, and read from its
// tail, as if nothing happened. (Reads used to hold the read lock for the
// whole disk read, and the writer needs the lock to publish: one slow read
// of one stream stalled the append worker of every stream.)
func TestCatchUpReadDoesNotBlockWrites(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem()}
	opts := memOpts(fs)
	opts.TailCacheBytes = 16 << 10 // the head of the log is only on disk
	l := openMem(t, opts)
	defer l.Close()
	var idx uint64
	write := func(n int) {
		for range n {
			idx++
			require.NoError(t, l.Write([]*pb.Entry{userEnt(idx, 1, 1, 1000, int64(idx))}, hardState(1, 1, idx)))
		}
		_, err := l.Sync()
		require.NoError(t, err)
	}
	write(300) // several segments
	hwm := l.EndOffset()

	fs.stall()
	read := make(chan error, 1)
	go func() {
		_, err := l.Read(0, hwm, 1<<20)
		read <- err
	}()
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not reach the disk")
	}
	wrote := make(chan struct{})
	go func() {
		write(100) // rolls segments too
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		fs.resume()
		t.Fatal("writes wait for a read stuck in its disk IO")
	}
	b, err := l.Read(l.EndOffset()-1, l.EndOffset(), 1<<20)
	require.NoError(t, err, "a tail read goes on too")
	require.Len(t, b, 1)
	fs.resume()
	require.NoError(t, <-read)
}
