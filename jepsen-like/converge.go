package campaign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// converge (check converge=1, or replicas-converge in a YAML definition):
// once the replicas agree on each stream's end, stop every server
// (SIGTERM), read each one's log of each stream from its data dir up to
// that end, compare the committed Kafka batches byte for byte
// (checker.CheckConvergence, one entry per batch at its base offset), and
// start the servers again. A server that was down stays out of it.
func (r *runner) converge(ends map[string]int64) (string, error) {
	var running []uint64
	for _, n := range r.c.Nodes {
		if n.Running() {
			running = append(running, n.ID)
		}
	}
	r.c.StopAll()
	var sb strings.Builder
	var errs []error
	for i, s := range r.streams {
		end, ok := ends[s]
		if !ok {
			continue
		}
		reps := map[string][]checker.ReplicaRecord{}
		for _, id := range running {
			n := r.c.Node(id)
			recs, err := readReplica(filepath.Join(n.DataDir, "streams", strconv.Itoa(i+1)), uint64(i+1), end)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: n%d's log: %w", s, id, err))
				continue
			}
			reps[fmt.Sprintf("n%d", id)] = recs
		}
		c := checker.CheckConvergence(reps)
		fmt.Fprintf(&sb, "%s: %d replicas' logs compared up to offset %d (%d batches held by two or more): ", s, c.Replicas, end, c.Compared)
		if c.OK {
			sb.WriteString("byte-identical\n")
		} else {
			fmt.Fprintf(&sb, "DIVERGE at offset %d %v %v\n", c.FirstDiff, c.Groups, c.Errors)
			errs = append(errs, fmt.Errorf("%s: replicas diverge at offset %d: %v %v", s, c.FirstDiff, c.Groups, c.Errors))
		}
	}
	for _, id := range running {
		r.c.Restart(id)
	}
	for _, s := range r.streams {
		r.c.WaitLeader(s, 30*time.Second)
	}
	return strings.TrimRight(sb.String(), "\n"), errors.Join(errs...)
}

// readReplica reads a stopped server's log of a stream from its data
// dir: each Kafka batch below end as it is stored, at its base offset.
func readReplica(dir string, stream uint64, end int64) ([]checker.ReplicaRecord, error) {
	l, err := storage.Open(storage.Options{FS: vfs.OS{}, Dir: dir, Stream: stream})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var out []checker.ReplicaRecord
	off := l.StartOffset()
	if e := l.EndOffset(); e < end {
		return nil, fmt.Errorf("ends at %d, before the agreed %d", e, end)
	}
	for off < end {
		bs, err := l.Read(off, end, 4<<20)
		if err != nil {
			return nil, err
		}
		if len(bs) == 0 {
			return nil, fmt.Errorf("read at %d: nothing below %d", off, end)
		}
		for _, b := range bs {
			data := b.Data
			for len(data) >= 12 {
				n := 12 + int(binary.BigEndian.Uint32(data[8:12]))
				if n > len(data) {
					return nil, fmt.Errorf("a batch of %d bytes at offset %d overruns its read", n, b.BaseOffset)
				}
				out = append(out, checker.ReplicaRecord{Offset: int64(binary.BigEndian.Uint64(data[0:8])), Bytes: data[:n]})
				data = data[n:]
			}
		}
		off = bs[len(bs)-1].NextOffset
	}
	return out, nil
}
