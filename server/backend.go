package server

import (
	"errors"
	"net"
	"strconv"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// backend is the Kafka front end's view of this server: streams are Raft
// groups on the Host, reads come from the storage logs.
type backend struct{ s *Server }

var _ kafka.Backend = backend{}

func (b backend) Brokers() []kafka.Broker {
	var out []kafka.Broker
	for _, p := range b.s.cfg.Peers {
		host, port, err := net.SplitHostPort(p.Kafka)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			continue
		}
		br := kafka.Broker{NodeID: int32(p.ID), Host: host, Port: int32(n)}
		if p.DC != "" {
			br.Rack = new(p.DC)
		}
		out = append(out, br)
	}
	return out
}

// Controller reports the lowest live-looking broker id: VDL has no Kafka
// controller; clients only need a stable, valid broker id here.
func (b backend) Controller() int32 {
	if len(b.s.cfg.Peers) == 0 {
		return -1
	}
	min := b.s.cfg.Peers[0].ID
	for _, p := range b.s.cfg.Peers {
		if p.ID < min {
			min = p.ID
		}
	}
	return int32(min)
}

func (b backend) Streams() []string {
	var names []string
	for _, sc := range b.s.cfg.Streams {
		names = append(names, sc.Name)
	}
	return sortedStrings(names)
}

func (b backend) Stream(name string) (kafka.StreamInfo, bool) {
	sc, ok := b.s.streamConfig(name)
	if !ok {
		return kafka.StreamInfo{}, false
	}
	info := kafka.StreamInfo{Leader: -1, Replicas: ids32(sc.Replicas), ISR: ids32(sc.Replicas)}
	st, hosted := b.s.stream(name)
	if !hosted {
		return info, true
	}
	leader, _ := b.s.host.Leader(st.cfg.ID)
	if leader != 0 {
		info.Leader = int32(leader)
	}
	if leader == b.s.cfg.NodeID {
		info.Local = b.s.host.Readable(st.cfg.ID)
		if !info.Local {
			info.Leader = -1 // elected but not serving yet: LEADER_NOT_AVAILABLE
		} else if gs, ok := b.s.host.Status(st.cfg.ID); ok {
			info.ISR = ids32(gs.InSync)
		}
	}
	return info, true
}

func (b backend) Produce(name string, records []byte, done func(int64, error)) {
	st, ok := b.s.stream(name)
	if !ok {
		done(0, kafka.ErrUnknownStream)
		return
	}
	err := b.s.host.ProposeFunc(st.cfg.ID, raftnode.UserData(records), func(r raftnode.Result, err error) {
		done(r.BaseOffset, err)
	})
	if err != nil {
		done(0, err)
	}
}

func (b backend) Log(name string) (kafka.LogView, error) {
	st, ok := b.s.stream(name)
	if !ok {
		if _, known := b.s.streamConfig(name); known {
			return nil, kafka.ErrNotLeader // hosted elsewhere
		}
		return nil, kafka.ErrUnknownStream
	}
	leader, _ := b.s.host.Leader(st.cfg.ID)
	switch {
	case leader == 0:
		return nil, kafka.ErrNoLeader
	case leader != b.s.cfg.NodeID:
		return nil, kafka.ErrNotLeader
	case !b.s.host.Readable(st.cfg.ID):
		return nil, kafka.ErrNoLeader
	}
	return logView{h: b.s.host, group: st.cfg.ID, log: st.log}, nil
}

// logView serves reads of a stream this server leads.
type logView struct {
	h     *raftnode.Host
	group uint64
	log   *storage.Log
}

func (v logView) StartOffset() int64 { return v.log.StartOffset() }
func (v logView) EndOffset() int64   { return v.log.EndOffset() }

func (v logView) HighWatermark() int64 {
	hwm, _, _ := v.h.HighWatermark(v.group)
	return hwm
}

func (v logView) Read(offset, hwm int64, maxBytes int) ([]storage.Batch, error) {
	return v.log.Read(offset, hwm, maxBytes)
}

// OffsetForTime finds the first batch whose max timestamp reaches ts and
// reports that batch's max timestamp (VDL's time index is per batch).
func (v logView) OffsetForTime(ts int64) (int64, int64, error) {
	hwm := v.HighWatermark()
	off, err := v.log.OffsetForTime(ts)
	if err != nil {
		return -1, -1, err
	}
	if off >= hwm {
		return -1, -1, nil
	}
	bs, err := v.log.Read(off, hwm, 1)
	if err != nil {
		if errors.Is(err, storage.ErrOutOfRange) {
			return -1, -1, nil
		}
		return -1, -1, err
	}
	if len(bs) == 0 || len(bs[0].Data) < 43 {
		return off, -1, nil
	}
	return off, maxTimestamp(bs[0].Data), nil
}

func (v logView) Fence() kafka.ReadFence { return v.h.Fence(v.group) }

func (v logView) Changed() <-chan struct{} {
	_, ch, ok := v.h.HighWatermark(v.group)
	if !ok {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return ch
}

func maxTimestamp(batch []byte) int64 {
	var ts int64
	for _, b := range batch[35:43] {
		ts = ts<<8 | int64(b)
	}
	return ts
}

func ids32(ids []uint64) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
