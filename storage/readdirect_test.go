package storage

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

// Catch-up reads of closed segments go past the page cache (ReadDirect, of
// whole blocks around records at any offset) and return exactly what was
// written, for every read size, and so do raft's reads of them (Entries);
// the active segment and KeepPageCache read through it. Mem refuses a
// misaligned direct read as the kernel does. A read budget of an odd size
// splits a read into pieces of whole blocks.
func TestCatchUpReadsClosedSegmentsDirect(t *testing.T) {
	for _, tc := range []struct {
		keep   bool
		budget int64
	}{{false, 0}, {true, 0}, {false, 10_000}} {
		keep := tc.keep
		t.Run(fmt.Sprint("keep=", keep, ",budget=", tc.budget), func(t *testing.T) {
			cfs := &countFS{FS: vfs.NewMem()}
			opts := memOpts(cfs)
			opts.TailCacheBytes = 8 << 10 // the head of the log only on disk
			opts.KeepPageCache = keep
			if tc.budget > 0 {
				opts.ReadBudget = NewReadBudget(tc.budget, 0, false)
			}
			l := openMem(t, opts)
			defer l.Close()
			var want [][]byte // batch bytes past the base offset and leader epoch (stamped)
			for i := uint64(1); i <= 300; i++ {
				b := kbatch(1+int(i%3), 100+int(i*37%900), int64(i))
				want = append(want, b[16:])
				require.NoError(t, l.Write([]*pb.Entry{ent(i, 1, userData(b))}, hardState(1, 1, i)))
			}
			_, err := l.Sync()
			require.NoError(t, err)
			end := l.EndOffset()

			for _, maxBytes := range []int{1, 700, 5000, 100 << 10, 1 << 20} {
				direct := cfs.directReads.Load()
				var got [][]byte
				for off := int64(0); off < end; {
					bs, rb, err := l.ReadPooled(off, end, maxBytes)
					require.NoError(t, err)
					require.NotEmpty(t, bs)
					require.Equal(t, off, bs[0].BaseOffset)
					for _, b := range bs {
						got = append(got, append([]byte(nil), b.Data[16:]...))
						off = b.NextOffset
					}
					rb.Release()
				}
				require.Equal(t, want, got, "maxBytes %d", maxBytes)
				if keep {
					require.Equal(t, direct, cfs.directReads.Load(), "kept in the page cache: read through it")
				} else {
					require.Greater(t, cfs.directReads.Load(), direct, "closed segments read direct")
				}
			}

			// Raft's reads (a follower catching up) of closed segments go past it too.
			direct := cfs.directReads.Load()
			ents, err := l.Entries(1, 301, 1<<30)
			require.NoError(t, err)
			require.Len(t, ents, 300)
			for i, e := range ents {
				require.Equal(t, want[i], e.Data[1+16:], "entry %d", i+1) // past TagUser
			}
			if keep {
				require.Equal(t, direct, cfs.directReads.Load())
			} else {
				require.Greater(t, cfs.directReads.Load(), direct, "raft reads of closed segments direct")
			}

			// A read of the active segment only, behind the tail cache, goes through the cache.
			direct = cfs.directReads.Load()
			bs, err := l.Read(end-40, end, 1<<20)
			require.NoError(t, err)
			require.NotEmpty(t, bs)
			require.Equal(t, direct, cfs.directReads.Load(), "the active segment is read through the cache")
		})
	}
}
