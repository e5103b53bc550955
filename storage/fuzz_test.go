package storage

import (
	"errors"
	"io"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

const fuzzDir = "/f"

func fuzzOpts(fs vfs.FS) Options {
	return Options{FS: fs, Dir: fuzzDir, Stream: 3, SegmentSize: 2 << 10, TailCacheBytes: 4 << 10}
}

// fuzzSeed builds a small real log and returns its first segment (closed),
// that segment's index files, and the second segment.
func fuzzSeed(tb testing.TB) (seg1, ridx1, lidx1, seg2 []byte) {
	mem := vfs.NewMem()
	l, err := Open(fuzzOpts(mem))
	if err != nil {
		tb.Fatal(err)
	}
	for i := uint64(1); i <= 12; i++ {
		e := userEnt(i, 1, 2, 150, int64(i))
		if i%4 == 0 {
			e = ent(i, 1, []byte{TagCommand, 1})
		}
		if err := l.Write([]*pb.Entry{e}, hardState(1, 1, i-1)); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := l.Sync(); err != nil {
		tb.Fatal(err)
	}
	l.mu.RLock()
	b1, b2 := l.segs[0].base, l.segs[1].base
	l.mu.RUnlock()
	read := func(name string) []byte {
		f, err := mem.Open(name)
		if err != nil {
			tb.Fatal(err)
		}
		size, _ := f.Size()
		b := make([]byte, size)
		if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
			tb.Fatal(err)
		}
		return b
	}
	return read(b1 + ".seg"), read(b1 + ".ridx"), read(b1 + ".lidx"), read(b2 + ".seg")
}

func FuzzRecover(f *testing.F) {
	s1, r1, l1, s2 := fuzzSeed(f)
	f.Add(s1, r1, l1, s2)
	f.Add(s1, []byte{}, []byte{}, []byte{})
	f.Add(s1[:len(s1)/2], r1, l1, s2[:100])
	f.Add(make([]byte, 4096), r1[:10], l1, []byte{})
	f.Fuzz(func(t *testing.T, seg1, ridx1, lidx1, seg2 []byte) {
		mem := vfs.NewMem()
		if err := mem.MkdirAll(fuzzDir); err != nil {
			t.Fatal(err)
		}
		put := func(name string, b []byte) {
			f, err := mem.Create(fuzzDir + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(b, 0); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
		}
		put("00000000000000000001.seg", seg1)
		put("00000000000000000001.ridx", ridx1)
		put("00000000000000000001.lidx", lidx1)
		if len(seg2) > 0 {
			name := "00000000000000000002.seg"
			if h, ok := decodeSegHeader(seg2); ok && h.first > 1 && h.first < 1<<40 {
				name = segBase("", h.first)[1:] + ".seg"
			}
			put(name, seg2)
		}
		l, err := Open(fuzzOpts(mem))
		if err != nil {
			return // refusing a damaged log is fine; crashing is not
		}
		defer l.Close()
		readAll(t, l)
	})
}

// readAll reads the whole log through every read API; only ErrCorrupt
// (damage found when a record is read) is acceptable.
func readAll(t *testing.T, l *Log) {
	ok := func(err error) {
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read of a recovered log: %v", err)
		}
	}
	fi, _ := l.FirstIndex()
	li, _ := l.LastIndex()
	for i := fi; i <= li; {
		ents, err := l.Entries(i, li+1, 4096)
		ok(err)
		if err != nil {
			break
		}
		i += uint64(len(ents))
	}
	for i := fi - 1; i <= li; i++ {
		_, err := l.Term(i)
		ok(err)
		_, err = l.NextOffsetAt(i)
		ok(err)
	}
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		b, err := l.Read(off, end, 1000)
		ok(err)
		if err != nil || len(b) == 0 {
			break
		}
		off = b[len(b)-1].NextOffset
	}
	_, err := l.OffsetForTime(5)
	ok(err)
	_, _, err = l.InitialState()
	ok(err)
	// And it stays writable.
	if err := l.Write([]*pb.Entry{userEnt(li+1, 1<<40, 1, 5, 1)}, nil); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatalf("sync after recovery: %v", err)
	}
}

func FuzzRecordDecode(f *testing.F) {
	rec := make([]byte, recSize(stateSize))
	h := recHeader{length: stateSize, typ: recState, index: 4, term: 2}
	h.encode(rec)
	(&state{term: 2, commit: 3}).encode(rec[recHeaderSize:])
	sealRecord(1, rec, stateSize)
	f.Add(rec)
	f.Add(kbatch(3, 10, 5))
	f.Add(append(kbatch(1, 0, 1), kbatch(2, 3, 4)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeSegHeader(b)
		_, _ = decodeMeta(b)
		if info, err := parseBatches(b); err == nil {
			c := append([]byte(nil), b...)
			StampBatches(c, 100, 7)
			if info2, err := parseBatches(c); err != nil || info2 != info {
				t.Fatalf("stamping changed the batches: %v", err)
			}
		}
		if len(b) < recHeaderSize || !headerPlausible(b, int64(len(b))+recAlign) {
			return
		}
		h := decodeRecHeader(b)
		if int(h.length)+recHeaderSize > len(b) {
			return
		}
		if recordCRC(1, b, b[recHeaderSize:recHeaderSize+int(h.length)]) != h.crc {
			return
		}
		var re [recHeaderSize]byte
		h.encode(re[:])
		le.PutUint32(re[:], h.crc)
		for i := range re {
			if re[i] != b[i] {
				t.Fatalf("header does not round-trip at byte %d", i)
			}
		}
	})
}
