package storage

import (
	"math/bits"
	"sync"
)

// Pooled read buffers. A catch-up fetch of 1 MiB used to allocate (and so
// zero) a fresh 1 MiB buffer per read: 12% of the leader's CPU went to
// mallocgcLarge/memclr and page faults. A ReadBuf is taken from a pool by
// size class and given back by the caller once the bytes are written to
// the socket; its memory is never cleared (every byte handed out was just
// overwritten by a pread). The pools hold at most what the fetches in
// flight used (bounded by the front end's request and fetch budgets), and
// the GC empties them when reads stop.

const (
	minBufShift = 16 // 64 KiB: smaller reads round up to it
	maxBufShift = 26 // 64 MiB: larger reads (one huge entry) are not pooled
	noBufClass  = -1 // a tail-cache read: only the batches slice is pooled
	unpooled    = -2 // a buffer too large to keep, or a Read's own
)

// Size classes: four per doubling (a 1 MiB fetch reads a little more, its
// record headers: it gets 1.25 MiB, not 2), so a buffer wastes at most a
// quarter of itself.
var (
	dataPools  [1 + (maxBufShift-minBufShift)*4]sync.Pool // of *ReadBuf, by class
	batchPool  sync.Pool                                  // of *ReadBuf without a buffer
	maxBufSize = 1 << maxBufShift
)

// sizeClass rounds n (<= maxBufSize) up to its class's size.
func sizeClass(n int) (size, class int) {
	if n <= 1<<minBufShift {
		return 1 << minBufShift, 0
	}
	s := bits.Len(uint(n - 1)) // 2^(s-1) < n <= 2^s
	step := 1 << (s - 3)
	size = (n + step - 1) &^ (step - 1) // 5 to 8 steps
	return size, 1 + (s-minBufShift-1)*4 + size/step - 5
}

// ReadBuf holds the memory a ReadPooled result aliases: the buffer disk
// reads were made into, and the batches slice itself. Release gives it
// back; the batches must not be used after.
type ReadBuf struct {
	buf     []byte
	batches []Batch
	class   int
}

// getReadBuf returns a ReadBuf whose buffer holds at least n bytes (none
// for n == 0). Its contents are whatever a previous read left.
func getReadBuf(n int) *ReadBuf {
	if n == 0 {
		if rb, ok := batchPool.Get().(*ReadBuf); ok {
			return rb
		}
		return &ReadBuf{class: noBufClass}
	}
	if n > maxBufSize {
		return &ReadBuf{buf: make([]byte, n), class: unpooled}
	}
	size, class := sizeClass(n)
	if rb, ok := dataPools[class].Get().(*ReadBuf); ok {
		return rb
	}
	return &ReadBuf{buf: make([]byte, size), class: class}
}

// Release gives the buffer back for another read. Nil is a no-op.
func (rb *ReadBuf) Release() {
	if rb == nil {
		return
	}
	clear(rb.batches) // drop references to tail-cache memory
	rb.batches = rb.batches[:0]
	switch {
	case rb.class == noBufClass:
		batchPool.Put(rb)
	case rb.class >= 0:
		dataPools[rb.class].Put(rb)
	}
}
