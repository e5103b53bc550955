package simulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/storage"
)

// Opt-in corruption faults (Config.BitFlips): bit flips in segment files
// and misdirected writes, on victim nodes only - at most a minority, drawn
// from the seed at the start. Correct behaviour: the corruption is detected
// and never served; a node that detects it stops for good (quarantined, as
// an operator would keep it down: wiping a voter's disk would make it
// forget its vote), and the rest of the cluster stays safe and live.

// chooseVictims picks 1 to (nodes-1)/2 victims from the "corrupt" stream.
func (s *Sim) chooseVictims() {
	s.corruptR = s.w.stream("corrupt")
	k := 1 + s.corruptR.IntN((len(s.nodes)-1)/2)
	var vs []*node
	for _, i := range s.corruptR.Perm(len(s.nodes))[:k] {
		s.nodes[i].victim = true
		vs = append(vs, s.nodes[i])
	}
	slices.SortFunc(vs, func(a, b *node) int { return int(a.id) - int(b.id) })
	s.w.record("bit flips on: corruption victims %s", names(vs))
}

// Segment format constants (storage/format.go, docs/storage.md), to aim
// flips at records.
const (
	segHeaderBytes = 64
	recHeaderBytes = 48
)

// flipBit flips one bit of a random segment file of n: usually inside a
// record (header or payload) of the valid-looking chain, sometimes
// anywhere in the file (segment header, free space after the log end).
func (s *Sim) flipBit(n *node, when string) {
	r := s.corruptR
	var files []string
	for _, g := range s.staticGroups() {
		dir := path.Join(n.dir(), fmt.Sprintf("g%d", g))
		names, _ := n.disk.List(dir)
		for _, name := range names {
			if strings.HasSuffix(name, ".seg") {
				files = append(files, path.Join(dir, name))
			}
		}
	}
	if len(files) == 0 {
		return
	}
	file := files[r.IntN(len(files))]
	size, err := n.disk.Stat(file)
	if err != nil || size == 0 {
		return
	}
	f, err := n.disk.Open(file)
	if err != nil {
		return
	}
	data := make([]byte, size)
	_, _ = f.ReadAt(data, 0)
	_ = f.Close()
	// Walk the records as laid out (without checking them).
	type span struct{ pos, n int64 }
	var recs []span
	for pos := int64(segHeaderBytes); pos+recHeaderBytes <= size; {
		length := int64(binary.LittleEndian.Uint32(data[pos+4:]))
		typ := data[pos+8]
		sz := (recHeaderBytes + length + 7) &^ 7
		if typ == 0 || typ > 5 || pos+sz > size {
			break
		}
		recs = append(recs, span{pos, recHeaderBytes + length})
		pos += sz
	}
	var off int64
	where := "anywhere"
	if len(recs) == 0 || r.IntN(8) == 0 {
		off = r.Int64N(size)
	} else {
		k := r.IntN(len(recs))
		off = recs[k].pos + r.Int64N(recs[k].n)
		where = fmt.Sprintf("record %d/%d", k+1, len(recs))
	}
	bit := uint(r.IntN(8))
	if err := n.disk.FlipBit(file, off, bit); err != nil {
		s.fail(checkHarness, "flip bit: %v", err)
		return
	}
	n.corrupted = true
	s.corruptionWindow(FaultBitflip.String(), fmt.Sprintf("n%d (%s) %s byte %d bit %d (%s)", n.id, when, file, off, bit, where))
}

// corruptionWindow counts and traces a corruption fault and marks it in
// the history as a short fault window (the damage itself is permanent; the
// window does not count against the nemesis' open-window limit).
func (s *Sim) corruptionWindow(kind, detail string) {
	s.w.fault(kind, "%s", detail)
	s.windows = append(s.windows, &window{done: true,
		fw: checker.FaultWindow{Start: s.w.now, End: s.w.now + 1e6, Kind: kind, Detail: detail}})
}

// detect handles a node reporting corruption: the expected fail-stop when
// corruption was injected into it (it stops for good), a failure when not.
func (s *Sim) detect(n *node, how string, err error) {
	if !n.corrupted {
		s.fail(checkCorruption, "n%d reports corruption (%s) but none was injected: %v", n.id, how, err)
		n.stop(false)
		return
	}
	s.detections[how]++
	s.w.record("CORRUPTION DETECTED n%d (%s), stopped for good: %v", n.id, how, err)
	s.windows = append(s.windows, &window{done: true,
		fw: checker.FaultWindow{Start: s.w.now, End: s.w.now + 1e6, Kind: "corruption-detected", Detail: fmt.Sprintf("n%d %s", n.id, how)}})
	n.quarantined = true
	n.stop(false)
}

// corruptionPanic: raft panics on a storage read error; on a corrupted
// node, one that wraps (or quotes) storage.ErrCorrupt is the expected
// fail-stop. Any other panic fails the run.
func (s *Sim) corruptionPanic(n *node, p any) bool {
	if !n.corrupted {
		return false
	}
	if err, ok := p.(error); ok && errors.Is(err, storage.ErrCorrupt) {
		return true
	}
	return strings.Contains(fmt.Sprint(p), storage.ErrCorrupt.Error())
}

// serveCorrupt (canary serve-corrupt) flips a bit in the last record value
// byte of the first batch of a read, as a store that does not verify its
// checksums would serve a bit rotted on disk. The batches are copied.
func serveCorrupt(bs []storage.Batch) []storage.Batch {
	if len(bs) == 0 || len(bs[0].Data) < 61+3 {
		return bs
	}
	out := slices.Clone(bs)
	d := slices.Clone(out[0].Data)
	n := int(int32(binary.BigEndian.Uint32(d[8:]))) + 12 // the first v2 batch
	if n > len(d) || n < 61+3 {
		return bs
	}
	d[n-2] ^= 1 // the byte before the last record's header count
	out[0].Data = d
	return out
}
