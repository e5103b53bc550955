package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// Replica is a replica's committed log of one group as read from its
// storage: every Kafka batch in [Start, HWM).
type Replica struct {
	Node       uint64
	Start, HWM int64
	Batches    []KBatch
}

// ReadCommitted reads the node's committed prefix of group through
// storage.Log.Read, up to the high watermark its host published.
func ReadCommitted(n *Node, group uint64) (Replica, error) {
	l := n.Log(group)
	if l == nil {
		return Replica{}, fmt.Errorf("n%d is not running", n.ID)
	}
	hwm, _, ok := n.Host().HighWatermark(group)
	if !ok {
		return Replica{}, fmt.Errorf("n%d does not host group %d", n.ID, group)
	}
	r := Replica{Node: n.ID, Start: l.StartOffset(), HWM: hwm}
	for off := r.Start; off < hwm; {
		runs, err := l.Read(off, hwm, 4<<20)
		if err != nil {
			return r, fmt.Errorf("n%d read at %d (hwm %d): %w", n.ID, off, hwm, err)
		}
		if len(runs) == 0 {
			return r, fmt.Errorf("n%d read at %d (hwm %d): nothing", n.ID, off, hwm)
		}
		for _, run := range runs {
			bs, err := SplitBatches(run.Data)
			if err != nil {
				return r, fmt.Errorf("n%d run at %d: %w", n.ID, run.BaseOffset, err)
			}
			for _, b := range bs {
				if b.Base+b.Count <= off {
					continue // before where we asked (an entry holding off starts earlier)
				}
				r.Batches = append(r.Batches, b)
			}
			off = run.NextOffset
		}
	}
	return r, nil
}

// From returns the replica's bytes of the batches whose base is >= from.
func (r Replica) From(from int64) []byte {
	var out []byte
	for _, b := range r.Batches {
		if b.Base >= from {
			out = append(out, b.Data...)
		}
	}
	return out
}

// Dense checks that offsets are dense: batches follow each other without
// gap or overlap from Start to HWM.
func (r Replica) Dense() error {
	next := r.Start
	if len(r.Batches) > 0 && r.Batches[0].Base < r.Start {
		next = r.Batches[0].Base
	}
	for i, b := range r.Batches {
		if b.Base != next {
			return fmt.Errorf("n%d batch %d at offset %d, want %d", r.Node, i, b.Base, next)
		}
		next = b.Base + b.Count
	}
	if next != r.HWM {
		return fmt.Errorf("n%d batches end at %d, hwm %d", r.Node, next, r.HWM)
	}
	return nil
}

// CheckAcked checks that every acknowledged proposal is in the replica at
// the offsets it was acknowledged with, byte for byte (bar the stamped
// base offset and leader epoch). Acks below the replica's start (deleted by retention) are
// skipped; the count of checked acks is returned.
func (r Replica) CheckAcked(acked []Acked) (int, error) {
	byBase := make(map[int64]KBatch, len(r.Batches))
	for _, b := range r.Batches {
		byBase[b.Base] = b
	}
	checked := 0
	for _, a := range acked {
		if a.Result.BaseOffset < r.Start {
			continue
		}
		b, ok := byBase[a.Result.BaseOffset]
		if !ok {
			return checked, fmt.Errorf("n%d: ack [%d,%d) from n%d: no batch at that offset (start %d, hwm %d)",
				r.Node, a.Result.BaseOffset, a.Result.NextOffset, a.Node, r.Start, r.HWM)
		}
		same := bytes.Equal(b.Data[8:batchfmt.OffLeaderEpoch], a.Data[8:batchfmt.OffLeaderEpoch]) &&
			bytes.Equal(b.Data[batchfmt.OffMagic:], a.Data[batchfmt.OffMagic:])
		if b.Base+b.Count != a.Result.NextOffset || !same {
			return checked, fmt.Errorf("n%d: ack [%d,%d) from n%d: stored batch differs", r.Node, a.Result.BaseOffset, a.Result.NextOffset, a.Node)
		}
		checked++
	}
	return checked, nil
}

// WaitConverged waits until every running server hosting group has applied
// the same high watermark (at least min) and their committed logs are
// byte-identical from the highest start offset on; it returns the replicas.
func (c *Cluster) WaitConverged(ctx context.Context, group uint64, min int64) ([]Replica, error) {
	var last error
	for {
		reps, err := c.compare(group, min)
		if err == nil {
			return reps, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return reps, fmt.Errorf("group %d did not converge: %w", group, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) compare(group uint64, min int64) ([]Replica, error) {
	nodes := c.Running()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no server runs")
	}
	var hwms []int64
	for _, n := range nodes {
		h, _, ok := n.Host().HighWatermark(group)
		if !ok {
			return nil, fmt.Errorf("n%d does not host group %d", n.ID, group)
		}
		hwms = append(hwms, h)
	}
	for i, h := range hwms {
		if h != hwms[0] || h < min {
			return nil, fmt.Errorf("high watermarks differ or are below %d: n%d=%d n%d=%d", min, nodes[0].ID, hwms[0], nodes[i].ID, h)
		}
	}
	var reps []Replica
	from := int64(0)
	for _, n := range nodes {
		r, err := ReadCommitted(n, group)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
		from = max(from, r.Start)
	}
	ref := reps[0].From(from)
	for _, r := range reps[1:] {
		if r.HWM != reps[0].HWM {
			return reps, fmt.Errorf("high watermark moved while reading")
		}
		if got := r.From(from); !bytes.Equal(ref, got) {
			return reps, fmt.Errorf("n%d and n%d differ from offset %d (%d vs %d bytes)", reps[0].Node, r.Node, from, len(ref), len(got))
		}
	}
	return reps, nil
}
