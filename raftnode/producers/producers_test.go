package producers

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The state machine's scripts (testdata/*.txt). Commands:
//
//	new [expiration=ms]            a fresh table
//	apply index= term= [base=]     fold in one entry; one batch per input line
//	check                          the verdict on one batch (input line)
//	overlay / drop-overlay         start / forget the leader's queued view
//	propose [prop=]                decide on a record set (input lines), on
//	                               the overlay if there is one
//	dump                           the table (or overlay)
//	roundtrip                      encode, decode, dump (no overlay)
//	purge                          drop expired producers
//
// A batch line: pid= epoch= seq= n= ts= (n records; ts its max timestamp;
// pid=-1 a plain batch).
type script struct {
	t       *Table
	overlay *Table
}

func (s *script) cur() *Table {
	if s.overlay != nil {
		return s.overlay
	}
	return s.t
}

func argInt(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			v, err := strconv.ParseInt(a.Vals[0], 10, 64)
			require.NoError(t, err)
			return v
		}
	}
	return def
}

// batches builds the input's batches as real v2 bytes and parses them back,
// so that the scripts go through Parse too.
func batches(t *testing.T, input string) ([]Batch, int64, int64) {
	var data []byte
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		kv := map[string]int64{"pid": -1, "epoch": -1, "seq": -1, "n": 1, "ts": 0}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			require.True(t, ok, "bad field %q", f)
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			kv[k] = n
		}
		data = append(data, makeBatch(kv["pid"], int16(kv["epoch"]), int32(kv["seq"]), int32(kv["n"]), kv["ts"])...)
	}
	return Parse(data, nil)
}

func makeBatch(pid int64, epoch int16, seq, n int32, ts int64) []byte {
	var recs []byte
	for i := int32(0); i < min(n, 100); i++ { // Parse reads headers only: a huge n has no records
		r := kmsg.Record{OffsetDelta: i, Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: n - 1, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: n, Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func describeLoc(l Loc) string {
	where := fmt.Sprintf("@%d/%d+%d", l.Index, l.Term, l.Delta)
	if l.Prop != 0 {
		where = fmt.Sprintf("@prop%d+%d", l.Prop, l.Delta)
	}
	off := "?"
	if l.Offset >= 0 {
		off = strconv.FormatInt(l.Offset, 10)
	}
	return fmt.Sprintf("%d-%d%s=%s", l.FirstSeq, l.LastSeq, where, off)
}

func dump(t *Table) string {
	var b strings.Builder
	clock := "-"
	if t.Clock != math.MinInt64 {
		clock = strconv.FormatInt(t.Clock, 10)
	}
	fmt.Fprintf(&b, "index=%d clock=%s\n", t.Index, clock)
	for _, id := range t.ids() {
		p := t.lookup(id)
		state := ""
		if t.Get(id) == nil {
			state = " (expired)"
		}
		var locs []string
		for _, l := range p.Batches {
			locs = append(locs, describeLoc(l))
		}
		fmt.Fprintf(&b, "pid=%d epoch=%d last-ts=%d%s [%s]\n", id, p.Epoch, p.LastTs, state, strings.Join(locs, " "))
	}
	return b.String()
}

func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{t: New(DefaultExpirationMs)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "new":
				s.t, s.overlay = New(argInt(t, d, "expiration", DefaultExpirationMs)), nil
				return "ok"
			case "apply":
				bs, _, maxTs := batches(t, d.Input)
				s.t.Apply(Where{Index: uint64(argInt(t, d, "index", 0)), Term: uint64(argInt(t, d, "term", 1)), Base: argInt(t, d, "base", -1)}, bs, maxTs)
				return dump(s.t)
			case "check":
				bs, _, _ := batches(t, d.Input)
				require.Len(t, bs, 1)
				v, l := s.cur().Check(bs[0])
				if v == Duplicate {
					return fmt.Sprintf("%s %s", v, describeLoc(l))
				}
				return v.String()
			case "overlay":
				s.overlay = s.t.Overlay()
				return "ok"
			case "drop-overlay":
				s.overlay = nil
				return "ok"
			case "propose":
				bs, _, maxTs := batches(t, d.Input)
				dec := s.cur().Propose(uint64(argInt(t, d, "prop", 1)), bs, maxTs)
				switch dec.Verdict {
				case Duplicate:
					return fmt.Sprintf("duplicate first=%s last=%s\n%s", describeLoc(dec.First), describeLoc(dec.Last), dump(s.cur()))
				case Append:
					return "append\n" + dump(s.cur())
				}
				return fmt.Sprintf("%s (pid=%d seq=%d)\n%s", dec.Verdict, dec.Batch.ID, dec.Batch.FirstSeq, dump(s.cur()))
			case "dump":
				return dump(s.cur())
			case "purge":
				s.t.Purge()
				return dump(s.t)
			case "roundtrip":
				enc := Encode(s.t)
				got, err := Decode(enc, s.t.Expiration)
				require.NoError(t, err)
				require.Equal(t, enc, Encode(got), "re-encoding differs")
				return dump(got)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// Parse reads the producer fields of every idempotent batch, the offsets
// of all, and wraps sequences as Kafka does.
func TestParse(t *testing.T) {
	var data []byte
	data = append(data, makeBatch(-1, -1, -1, 3, 50)...)
	data = append(data, makeBatch(9, 2, math.MaxInt32-1, 4, 70)...)
	bs, offsets, maxTs := Parse(data, nil)
	require.Equal(t, int64(7), offsets)
	require.Equal(t, int64(70), maxTs)
	require.Equal(t, []Batch{{ID: 9, Epoch: 2, FirstSeq: math.MaxInt32 - 1, LastSeq: 1, MaxTs: 70, Delta: 3, Count: 4}}, bs)
	require.True(t, inSequence(math.MaxInt32, 0))
	require.True(t, inSequence(4, 5))
	require.False(t, inSequence(4, 6))
}

// Decode refuses what Encode did not make.
func TestDecodeRefusesDamage(t *testing.T) {
	tb := New(1000)
	bs, _, maxTs := Parse(makeBatch(3, 0, 0, 2, 10), nil)
	tb.Apply(Where{Index: 4, Term: 1, Base: 20}, bs, maxTs)
	enc := Encode(tb)
	for i := range enc {
		b := append([]byte(nil), enc...)
		b[i] ^= 0x40
		_, err := Decode(b, 1000)
		require.ErrorIs(t, err, ErrCorrupt, "byte %d flipped", i)
	}
	_, err := Decode(enc[:len(enc)-1], 1000)
	require.ErrorIs(t, err, ErrCorrupt)
}

// FuzzDecode: any bytes either fail to decode or decode to a table that
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	tb := New(1000)
	bs, _, maxTs := Parse(append(makeBatch(3, 0, 0, 2, 10), makeBatch(5, 1, 7, 1, 12)...), nil)
	tb.Apply(Where{Index: 4, Term: 1, Base: 20}, bs, maxTs)
	f.Add(Encode(tb))
	f.Add(Encode(New(1000)))
	f.Add([]byte("VDLP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b, 1000)
		if err != nil {
			return
		}
		// Expired producers are left out when encoding: compare what is live.
		enc := Encode(got)
		again, err := Decode(enc, 1000)
		require.NoError(t, err)
		require.Equal(t, enc, Encode(again))
		if len(got.Producers()) == got.Len() {
			require.Equal(t, b, enc)
		}
	})
}

// BenchmarkProducerState: what the state costs per idempotent batch on the
// leader — the decision against its log and queue (Propose on an overlay)
// and folding the batch into the head and the committed tables — with
// 1000 producers writing in turn.
func BenchmarkProducerState(b *testing.B) {
	const producers = 1000
	head, committed := New(DefaultExpirationMs), New(DefaultExpirationMs)
	seq := make([]int32, producers)
	data := make([][]byte, producers)
	for p := range data {
		data[p] = makeBatch(int64(p), 0, 0, 1, 1000)
	}
	var scratch []Batch
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := i % producers
		d := data[p]
		binary.BigEndian.PutUint32(d[53:], uint32(seq[p])) // baseSequence
		seq[p]++
		bs, _, maxTs := Parse(d, scratch[:0])
		scratch = bs
		over := head.Overlay()
		if dec := over.Propose(uint64(i+1), bs, maxTs); dec.Verdict != Append {
			b.Fatalf("batch %d: %v", i, dec.Verdict)
		}
		w := Where{Index: uint64(i + 1), Term: 1, Base: int64(i)}
		head.Apply(Where{Index: w.Index, Term: 1, Base: -1}, bs, maxTs)
		committed.Apply(w, bs, maxTs)
	}
}
