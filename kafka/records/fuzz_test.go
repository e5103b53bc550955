package records

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/vdl-project/vdl/kafka/batchfmt"
)

const fuzzLimit = 1 << 20

func FuzzValidateV2(f *testing.F) {
	f.Add(buildV2(f, CodecNone, mkTestRecords(3, 1), 0))
	f.Add(append(buildV2(f, CodecGzip, mkTestRecords(4, 1), 0), buildV2(f, CodecZstd, mkTestRecords(2, 1), 0)...))
	f.Add(buildV2(f, CodecSnappy, mkTestRecords(1, 1), attrLogAppendTime))
	f.Add(buildV2(f, CodecLZ4, mkTestRecords(5, 1), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := ValidateV2(b, fuzzLimit)
		if err != nil {
			return
		}
		whole, rest := Split(b)
		if len(rest) != 0 || len(whole) != len(b) || info.Bytes != len(b) {
			t.Fatalf("accepted bytes are not whole batches: rest %d", len(rest))
		}
		n := 0
		for _, batch := range Batches(b) {
			n++
			_ = CheckRecords(batch, fuzzLimit)
		}
		if n != info.Batches {
			t.Fatalf("Batches saw %d, ValidateV2 %d", n, info.Batches)
		}
		c := append([]byte{}, b...)
		StampBaseOffsets(c, 1<<40)
		for _, magic := range []int8{0, 1} {
			if _, err := ToMessageSet(c, magic); err != nil {
				t.Fatalf("ToMessageSet failed on accepted input: %v", err)
			}
		}
	})
}

// FuzzToMessageSet builds batches ValidateV2 accepts around arbitrary record
// sections, so the conversion's leniency is what gets exercised.
func FuzzToMessageSet(f *testing.F) {
	add := func(codec int8, n int, attrs int16) {
		b := buildV2(f, codec, mkTestRecords(n, 1), attrs)
		f.Add(b[HeaderSize:], byte(codec)|byte(attrs), int32(n), int64(5))
	}
	add(CodecNone, 3, 0)
	add(CodecGzip, 4, attrLogAppendTime)
	add(CodecSnappy, 2, 0)
	add(CodecLZ4, 6, 0)
	add(CodecZstd, 1, 0)
	f.Fuzz(func(t *testing.T, section []byte, attrs byte, count int32, base int64) {
		attrs &^= attrTransactional | attrControl
		if attrs&attrCodecMask > 4 {
			attrs &^= 0x4
		}
		if count <= 0 {
			count = 1
		}
		if attrs&attrCodecMask == 0 && int64(count)*minRecordSize > int64(len(section)) {
			count = max(1, int32(len(section)/minRecordSize))
		}
		b := make([]byte, HeaderSize, HeaderSize+len(section))
		b = append(b, section...)
		be := binary.BigEndian
		be.PutUint64(b[batchfmt.OffBaseOffset:], uint64(base))
		be.PutUint32(b[batchfmt.OffBatchLength:], uint32(len(b)-batchfmt.LengthOverhead))
		b[batchfmt.OffMagic] = 2
		be.PutUint16(b[batchfmt.OffAttributes:], uint16(attrs))
		be.PutUint32(b[batchfmt.OffLastOffsetDelta:], uint32(count-1))
		be.PutUint32(b[batchfmt.OffRecordCount:], uint32(count))
		be.PutUint32(b[batchfmt.OffCRC:], crc32.Checksum(b[batchfmt.OffAttributes:], castagnoli))
		if _, err := ValidateV2(b, 1<<30); err != nil {
			if len(section) >= minRecordSize {
				t.Fatalf("constructed batch rejected: %v", err)
			}
			return
		}
		for _, magic := range []int8{0, 1} {
			ms, err := ToMessageSet(b, magic)
			if err != nil {
				t.Fatalf("ToMessageSet: %v", err)
			}
			// The output is a well-formed MessageSet a legacy produce accepts.
			if len(ms) > 0 {
				if _, _, err := FromMessageSet(ms, 1<<30, 1<<30); err != nil {
					t.Fatalf("ToMessageSet output does not parse: %v", err)
				}
			}
		}
	})
}

func FuzzFromMessageSet(f *testing.F) {
	in := legacyInputs(4)
	for _, magic := range []int8{0, 1} {
		for _, codec := range []int8{CodecNone, CodecGzip, CodecSnappy, CodecLZ4} {
			f.Add(legacySet(f, magic, codec, in, 3))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, info, err := FromMessageSet(b, fuzzLimit, fuzzLimit)
		if err != nil {
			return
		}
		vi, err := ValidateV2(out, 2*fuzzLimit)
		if err != nil {
			t.Fatalf("FromMessageSet output rejected: %v", err)
		}
		if vi.Records != info.Records || vi.Batches != info.Batches {
			t.Fatalf("info %+v vs %+v", info, vi)
		}
		for _, batch := range Batches(out) {
			if err := CheckRecords(batch, 4*fuzzLimit); err != nil {
				t.Fatalf("FromMessageSet wrote bad records: %v", err)
			}
		}
	})
}

func FuzzDecompress(f *testing.F) {
	for _, c := range allCodecs {
		z, _ := Compress(c, sample(3000))
		f.Add(byte(c), z)
	}
	f.Add(byte(CodecSnappy), []byte("\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x03\x02\x04\x00"))
	f.Fuzz(func(t *testing.T, codec byte, b []byte) {
		const limit = 64 << 10
		out, err := Decompress(int8(codec%6), b, limit)
		if err == nil && len(out) > limit {
			t.Fatalf("output %d over limit", len(out))
		}
	})
}
