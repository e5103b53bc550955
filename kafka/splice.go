package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

// Zero-copy fetch responses. A fetch used to copy the stored bytes three
// times on their way to the socket: into the response by kmsg's AppendTo,
// into the session's output, and (several stored batches) into one joined
// slice. For Fetch v4–v11 the response is now encoded by kmsg with every
// partition's records empty, and the stored batches are spliced in as
// separate pieces: the driver writes the pieces with one writev (the
// kernel's copy into the socket is the only one left for tail-cache reads;
// disk reads add their pread). Everything but the records bytes stays
// kmsg's encoding.
//
// Why splicing is exact: in v4–v11 (not flexible) a partition's records
// field is its last one, an int32 length and the bytes, and no array count
// or length before it depends on the records' size except the frame's own
// length. With empty records the field is 00 00 00 00 at the end of each
// partition; filling in the length there and writing the bytes after it
// gives what kmsg would have encoded (TestSpliceMatchesKmsg checks this
// byte for byte). Partition ends are found by encoding one-partition probes
// with kmsg, never by a codec of our own, and the splice is abandoned (the
// response copied as before) if any check fails.

// Releaser gives back memory a read's batches alias.
type Releaser interface{ Release() }

// PooledReader is an optional LogView method: Read into pooled memory,
// which the front end gives back (rel.Release) once the response holding
// the batches is written out, and never touches after. rel may be nil.
type PooledReader interface {
	ReadPooled(offset, hwm int64, maxBytes int) (batches []batchfmt.Batch, rel Releaser, err error)
}

// spliceable reports whether a fetch response of version v can take its
// records as pieces.
func spliceable(v int16) bool {
	return v >= 4 && v <= 11
}

// partitionEnds returns the offsets in resp's encoded body at which each
// partition ends (topics and partitions in order), measured with kmsg on
// probes holding one partition each; ok is false if the layout is not the
// one splicing needs (a body of bodyLen bytes, each partition ending with
// empty records).
func partitionEnds(resp *kmsg.FetchResponse, body []byte) ([]int, bool) {
	if resp.IsFlexible() {
		return nil, false
	}
	probe := *resp
	probe.Topics = nil
	var scratch []byte
	scratch = probe.AppendTo(scratch[:0])
	base := len(scratch) // header fields and the topic count
	one := make([]kmsg.FetchResponseTopic, 1)
	probe.Topics = one
	pos, ends := base, make([]int, 0, 4)
	for _, t := range resp.Topics {
		one[0] = t
		one[0].Partitions = nil
		scratch = probe.AppendTo(scratch[:0])
		th := len(scratch) - base // name and partition count
		pos += th
		for k := range t.Partitions {
			one[0].Partitions = t.Partitions[k : k+1]
			scratch = probe.AppendTo(scratch[:0])
			pos += len(scratch) - base - th
			if pos < 4 || pos > len(body) || binary.BigEndian.Uint32(body[pos-4:]) != 0 {
				return nil, false
			}
			ends = append(ends, pos)
		}
	}
	return ends, pos == len(body)
}

// spliceFetch encodes a fetch response frame whose partitions' records
// (empty in resp) are recs, one list of pieces per partition in order: it
// returns the frame as pieces (the stored slices not copied), or ok false
// when the response cannot be spliced.
func spliceFetch(key int16, corr int32, resp *kmsg.FetchResponse, recs [][][]byte) ([][]byte, bool) {
	if !spliceable(resp.Version) {
		return nil, false
	}
	frame := appendResponse(nil, key, corr, resp)
	body := resp.AppendTo(nil)
	bodyStart := len(frame) - len(body)
	ends, ok := partitionEnds(resp, body)
	if !ok || len(ends) != len(recs) {
		return nil, false
	}
	npieces, total := 1, 0
	for _, segs := range recs {
		npieces += len(segs) + 1
		for _, b := range segs {
			total += len(b)
		}
	}
	pieces := make([][]byte, 0, npieces)
	prev := 0
	for i, segs := range recs {
		n := 0
		for _, b := range segs {
			n += len(b)
		}
		if n == 0 {
			continue
		}
		end := bodyStart + ends[i]
		binary.BigEndian.PutUint32(frame[end-4:], uint32(n))
		pieces = append(pieces, frame[prev:end:end])
		for _, b := range segs {
			if len(b) > 0 {
				pieces = append(pieces, b)
			}
		}
		prev = end
	}
	pieces = append(pieces, frame[prev:])
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4+total))
	return pieces, true
}

// joinPieces copies pieces into one slice.
func joinPieces(dst []byte, pieces [][]byte) []byte {
	for _, p := range pieces {
		dst = append(dst, p...)
	}
	return dst
}

func piecesLen(pieces [][]byte) int {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	return n
}

func releaseAll(rels []Releaser) {
	for _, r := range rels {
		r.Release()
	}
}
