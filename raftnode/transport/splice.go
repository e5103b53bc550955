package transport

import (
	"hash/crc32"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// spliceMin is the entry data size from which a frame writes the data
// from the entry itself instead of a copy. An append goes to every
// follower, each in a frame of its own: copying a 1 MB produce into each
// frame was a tenth of a leader's CPU (BenchmarkProduceDefaults'
// profile). Entries are never changed once made, so a queued frame may
// hold on to their data until it is written.
const spliceMin = 16 << 10

// Protobuf field numbers of raftpb.Message.Entries and raftpb.Entry.Data.
const (
	entriesField protowire.Number = 7
	dataField    protowire.Number = 4
)

// splice is entry data written after the first at bytes of a frame's
// buffer (after the previous splice's).
type splice struct {
	at   int
	data []byte
}

// splices says whether m carries entry data worth splicing (spliceMin).
func splices(m *raftpb.Message) bool {
	for _, e := range m.GetEntries() {
		if len(e.GetData()) >= spliceMin {
			return true
		}
	}
	return false
}

// encodeSpliced is encodeFrame for a message with large entries: the
// frame's buffer holds the message without its entries, then each entry
// with the data of large ones left out and spliced in (sp). A decoder
// sees the same message: the fields of a protobuf message may come in any
// order, and a repeated field's elements are those of all its occurrences
// in order.
func encodeSpliced(group, from uint64, m *raftpb.Message) (*[]byte, []splice, error) {
	head := without(m, entriesField)
	bp := getBuf(frameOverheadLen + proto.Size(head) + 64*len(m.GetEntries()))
	b, err := proto.MarshalOptions{}.MarshalAppend((*bp)[:frameOverheadLen], head)
	if err != nil {
		putBuf(bp)
		return nil, nil, err
	}
	var sp []splice
	n := 0 // spliced bytes
	for _, e := range m.GetEntries() {
		data := e.GetData()
		b = protowire.AppendTag(b, entriesField, protowire.BytesType)
		if len(data) < spliceMin {
			b = protowire.AppendVarint(b, uint64(proto.Size(e)))
			b, err = proto.MarshalOptions{}.MarshalAppend(b, e)
		} else {
			rest := without(e, dataField)
			size := proto.Size(rest) + protowire.SizeTag(dataField) + protowire.SizeBytes(len(data))
			b = protowire.AppendVarint(b, uint64(size))
			b, err = proto.MarshalOptions{}.MarshalAppend(b, rest)
			b = protowire.AppendTag(b, dataField, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(len(data)))
			sp = append(sp, splice{at: len(b), data: data})
			n += len(data)
		}
		if err != nil {
			putBuf(bp)
			return nil, nil, err
		}
	}
	putFrameHeader(b, group, from, len(b)+n)
	*bp = b
	return bp, sp, nil
}

// without returns a shallow copy of m without one of its fields (its
// other fields and unknown fields shared, not copied).
func without[M proto.Message](m M, field protowire.Number) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != field {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return dst.Interface().(M)
}

// writeFrame writes a frame: its buffer with the splices in their places.
func writeFrame(w io.Writer, b []byte, sp []splice) error {
	at := 0
	for _, s := range sp {
		if _, err := w.Write(b[at:s.at]); err != nil {
			return err
		}
		if _, err := w.Write(s.data); err != nil {
			return err
		}
		at = s.at
	}
	_, err := w.Write(b[at:])
	return err
}

// sealSpliced puts the CRC of a frame with splices into its header.
func sealSpliced(b []byte, sp []splice) {
	crc, at := uint32(0), frameHeaderLen
	for _, s := range sp {
		crc = crc32.Update(crc, castagnoli, b[at:s.at])
		crc = crc32.Update(crc, castagnoli, s.data)
		at = s.at
	}
	putCRC(b, crc32.Update(crc, castagnoli, b[at:]))
}
