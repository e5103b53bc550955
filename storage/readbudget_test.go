package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// catchUpLog opens a log on fs in dir whose head is only on disk (a tiny
// tail cache), filled with 300 entries of one 1000-byte record.
func catchUpLog(t *testing.T, fs vfs.FS, dir string, b *ReadBudget) (*Log, func(int)) {
	opts := memOpts(fs)
	opts.Dir, opts.TailCacheBytes, opts.ReadBudget = dir, 16<<10, b
	l := openMem(t, opts)
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
	return l, write
}

// Catch-up reads of the logs sharing a budget read the disk at most
// budget bytes at once: while a read of 200 KiB is inside a pread (a
// segment's run: close to 64 KiB, the budget), a second one, of another
// stream, waits for the budget instead of adding its own to the device's
// queue; it goes on when the first pread is done. Tail reads and writes
// of either log do not wait meanwhile.
func TestReadBudgetBoundsCatchUpReads(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem()}
	budget := NewReadBudget(64<<10, 0, false)
	a, writeA := catchUpLog(t, fs, "/data/a", budget)
	defer a.Close()
	b, _ := catchUpLog(t, fs, "/data/b", budget)
	defer b.Close()
	hwmA, hwmB := a.EndOffset(), b.EndOffset()
	wantB, err := b.Read(0, hwmB, 200<<10)
	require.NoError(t, err)

	fs.stall()
	readA := make(chan error, 1)
	go func() {
		_, err := a.Read(0, hwmA, 200<<10)
		readA <- err
	}()
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first read did not reach the disk")
	}
	type result struct {
		bs  []Batch
		err error
	}
	readB := make(chan result, 1)
	go func() {
		bs, err := b.Read(0, hwmB, 200<<10)
		readB <- result{bs, err}
	}()
	require.Eventually(t, func() bool { return budget.Waiting() == 1 }, 10*time.Second, time.Millisecond,
		"the second catch-up read waits for the budget")
	require.Empty(t, fs.entered, "the second read has not started its preads")

	// Meanwhile the tail of either log is read, and a log is written.
	tail, err := b.Read(hwmB-1, hwmB, 1<<20)
	require.NoError(t, err, "a tail read does not wait for the budget")
	require.Len(t, tail, 1)
	wrote := make(chan struct{})
	go func() {
		writeA(10)
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		fs.resume()
		t.Fatal("writes wait for the read budget")
	}

	fs.resume()
	require.NoError(t, <-readA)
	got := <-readB
	require.NoError(t, got.err)
	require.Equal(t, wantB, got.bs)
	require.GreaterOrEqual(t, budget.Waits(), int64(1))
	require.Zero(t, budget.Waiting())
}

// The budget is first come, first served; a read larger than the budget
// runs alone; release is idempotent.
func TestReadBudgetOrder(t *testing.T) {
	b := NewReadBudget(100, 0, false)
	r1 := b.acquire(60)
	got := make(chan int, 3)
	go func() { r := b.acquire(500); got <- 2; r() }() // more than the budget: waits for it all
	require.Eventually(t, func() bool { return b.Waiting() == 1 }, 10*time.Second, time.Millisecond)
	go func() { r := b.acquire(10); got <- 3; r() }() // would fit, but comes after
	require.Eventually(t, func() bool { return b.Waiting() == 2 }, 10*time.Second, time.Millisecond)
	r1()
	r1()
	require.Equal(t, 2, <-got)
	require.Equal(t, 3, <-got)
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.used == 0 }, 10*time.Second, time.Millisecond)
	var nilBudget *ReadBudget
	nilBudget.acquire(1 << 30)()
	require.Equal(t, int64(1<<20), nilBudget.aheadWindow(1<<20))
	require.Equal(t, int64(100), b.aheadWindow(1<<20))
}

// With a rate, reads are paced: 4 MiB at 20 MiB/s take at least 150 ms
// (the first read starts at once).
func TestReadBudgetPaces(t *testing.T) {
	b := NewReadBudget(0, 20<<20, false)
	require.Equal(t, int64(DefaultCatchUpReadBytes), b.Limit())
	start := time.Now()
	for range 4 {
		b.acquire(1 << 20)()
	}
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	require.Equal(t, int64(3), b.Waits())
}
