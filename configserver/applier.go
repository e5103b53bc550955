package configserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/records"
	"github.com/vdl-project/vdl/raftnode"
)

// The command log is an ordinary VDL log: each command is one record (its
// JSON as the value) in a RecordBatch v2, appended through Raft like a
// produce, so the config servers reuse the storage engine and the Raft
// driver unchanged. The applier reads committed records in offset order
// and applies each to the bbolt state at its offset, exactly once.

// propose appends cmd through Raft and waits until it is applied; it
// returns the command's outcome.
func (s *Service) propose(ctx context.Context, cmd Command) (Outcome, error) {
	if !s.isLeader() {
		return Outcome{}, ErrNotLeader
	}
	fpBeforePropose()
	value, err := json.Marshal(cmd)
	if err != nil {
		return Outcome{}, err
	}
	recs := appendRecord(nil, value)
	res, err := s.host.Propose(ctx, group, raftnode.UserData(records.Wrap(recs, 1, cmd.At)))
	if err != nil {
		if errors.Is(err, raftnode.ErrNotLeader) {
			return Outcome{}, ErrNotLeader
		}
		return Outcome{}, fmt.Errorf("config log: %w", err)
	}
	fpAfterPropose()
	if err := s.waitApplied(ctx, res.BaseOffset+1); err != nil {
		return Outcome{}, err
	}
	out, ok := s.state.Outcome(res.BaseOffset)
	if !ok {
		return Outcome{}, fmt.Errorf("config log: the outcome of offset %d is gone", res.BaseOffset)
	}
	return out, nil
}

// appendRecord encodes one record holding value (offset delta 0).
func appendRecord(dst, value []byte) []byte {
	r := kmsg.Record{Value: value}
	body := r.AppendTo(nil) // Length is the first varint: encode, measure, encode again
	r.Length = int32(len(body) - 1)
	for {
		body = r.AppendTo(body[:0])
		n := int32(len(body) - varintLen(r.Length))
		if n == r.Length {
			return append(dst, body...)
		}
		r.Length = n
	}
}

func varintLen(v int32) int {
	u := uint32(v<<1) ^ uint32(v>>31)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// waitApplied waits until the state has applied every offset below next.
func (s *Service) waitApplied(ctx context.Context, next int64) error {
	for {
		s.appMu.Lock()
		ch := s.applied
		s.appMu.Unlock()
		if s.state.Applied() >= next {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return errors.New("config server stopping")
		}
	}
}

// readBarrier makes a leader's state current: a read index (the leader is
// still the leader) and every command committed before it applied.
func (s *Service) readBarrier(ctx context.Context) error {
	if !s.isLeader() {
		return ErrNotLeader
	}
	f := s.host.Fence(group)
	select {
	case <-f.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := f.Err(); err != nil {
		return ErrNotLeader
	}
	hwm, _, ok := s.host.HighWatermark(group)
	if !ok {
		return ErrNotLeader
	}
	return s.waitApplied(ctx, hwm)
}

// runApplier applies committed commands as the high watermark moves.
func (s *Service) runApplier() {
	defer s.wg.Done()
	for {
		hwm, changed, ok := s.host.HighWatermark(group)
		if ok && s.stateBehindLog() {
			if err := s.copyState(); err != nil {
				s.log.Warn("the state is behind the log's start (a snapshot was installed): cannot copy it yet", "err", err)
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
			continue
		}
		if ok && s.state.Applied() < hwm {
			if err := s.applyUpTo(hwm); err != nil {
				s.log.Error("config log: cannot apply", "err", err)
				s.host.FailStop(err)
				return
			}
			continue
		}
		select {
		case <-s.ctx.Done():
			return
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

func (s *Service) applyUpTo(hwm int64) error {
	batches, err := s.slog.Read(s.state.Applied(), hwm, 1<<20)
	if err != nil {
		return err
	}
	for _, b := range batches {
		data := b.Data
		for len(data) > 0 {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(data); err != nil {
				return fmt.Errorf("batch at %d: %w", b.BaseOffset, err)
			}
			size := int(rb.Length) + 12
			recs := rb.Records
			for i := range int(rb.NumRecords) {
				var r kmsg.Record
				if err := r.ReadFrom(recs); err != nil {
					return fmt.Errorf("record %d of the batch at %d: %w", i, rb.FirstOffset, err)
				}
				recs = recs[min(len(recs), int(r.Length)+varintLen(r.Length)):]
				if err := s.state.Apply(rb.FirstOffset+int64(r.OffsetDelta), r.Value); err != nil {
					return err
				}
			}
			data = data[min(len(data), size):]
		}
	}
	s.appMu.Lock()
	close(s.applied)
	s.applied = make(chan struct{})
	s.appMu.Unlock()
	return nil
}
