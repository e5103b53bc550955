package records

import (
	"crypto/rand"
	"fmt"
	"testing"
)

// BenchmarkToMessageSet: down-conversion for the Kafka 0.10 profile (Fetch
// v2-v3: MessageSet magic 1) of 1 MiB of stored batches, on one goroutine:
// MB/s is output per core. Values of 1 KiB and 16 KiB (the sarama
// 0.10 case), uncompressed and snappy (a compressed batch becomes one
// compressed wrapper: decompress, convert, compress). Target: >= 1 GB/s of
// output per core uncompressed.
func BenchmarkToMessageSet(b *testing.B) {
	for _, codec := range []int8{CodecNone, CodecSnappy} {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("codec=%d/value=%dK", codec, size>>10), func(b *testing.B) {
				perBatch := max(1, (64<<10)/size) // 64 KiB batches
				var data []byte
				for off := int64(0); len(data) < 1<<20; off += int64(perBatch) {
					recs := make([]testRecord, perBatch)
					for i := range recs {
						v := make([]byte, size)
						_, _ = rand.Read(v[:size/2]) // half compressible
						recs[i] = testRecord{Value: v, Ts: 1000}
					}
					batch := buildV2(b, codec, recs, 0)
					StampBaseOffsets(batch, off)
					data = append(data, batch...)
				}
				out, err := ToMessageSet(data, 1)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(out)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := ToMessageSet(data, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
